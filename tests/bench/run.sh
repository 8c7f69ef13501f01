#!/usr/bin/env bash
# make bench: the performance report of issue 2 (a report, not a test).
#
# Builds the two tools into build/bench/, starts its own ZooKeeper, zkresp and
# redis-server on free loopback ports in a temp dir, and measures, each for
# BENCH_SECONDS (default 5) after a BENCH_WARMUP (default 1) discarded warm-up:
#
#   lock pairs at C=1 and C=64    zkresp (respbench: SET NX PX 30000 + DELIFEQ)
#                                 vs raw libzookeeper_mt (zkraw: create
#                                 EPHEMERAL + delete at version 0)
#   GET of a held lock, C=1, 64   zkresp vs redis-server
#
# and prints a table with the targets marked met / not met.  Exit status 0
# whenever every measurement ran (a missed target is not a failure); non-zero
# when something could not be built, started or measured.
#
# Environment:
#   BENCH_SECONDS     measured seconds per run (default 5)
#   BENCH_WARMUP      discarded warm-up seconds per run (default 1)
#   BENCH_JVM_WARMUP  seconds of raw load before the first measurement, so the
#                     ZooKeeper JIT is warm for everyone (default 3)
#   ZKRESP_BIN        the daemon to measure (default build/zkresp)
#   BENCH_KEEP=1      keep the temp dir (logs) after the run
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

SECS=${BENCH_SECONDS:-5}
WARMUP=${BENCH_WARMUP:-1}
JVM_WARMUP=${BENCH_JVM_WARMUP:-3}
ZKRESP=${ZKRESP_BIN:-$root/build/zkresp}
CC=${CC:-cc}
ZKSERVER=/usr/share/zookeeper/bin/zkServer.sh
out=$root/build/bench

log() { printf 'bench: %s\n' "$*" >&2; }
fail() {
    printf 'bench: FAILED: %s\n' "$*" >&2
    exit 1
}

[ -x "$ZKRESP" ] || fail "$ZKRESP not built (run make bench)"
[ -x "$ZKSERVER" ] || fail "$ZKSERVER missing (Debian package zookeeper)"
command -v redis-server >/dev/null || fail "redis-server missing"
command -v redis-cli >/dev/null || fail "redis-cli missing"

# ---------------------------------------------------------------- build
mkdir -p "$out"
CFLAGS_BENCH="-std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -O2 -g"
# shellcheck disable=SC2086
$CC $CFLAGS_BENCH tests/bench/zkraw.c -o "$out/zkraw" \
    -lzookeeper_mt -lpthread || fail "building zkraw"
# shellcheck disable=SC2086,SC2046
$CC $CFLAGS_BENCH $(pkg-config --cflags hiredis 2>/dev/null) \
    tests/bench/respbench.c -o "$out/respbench" \
    $(pkg-config --libs hiredis 2>/dev/null || echo -lhiredis) ||
    fail "building respbench"

# ---------------------------------------------------------------- processes
tmp=$(mktemp -d "${TMPDIR:-/tmp}/zkresp-bench.XXXXXX")
started=() # PIDs of what this script started, stopped in reverse order

stop_pid() {
    local pid=$1 i
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    local rc=$? i
    trap - EXIT INT TERM
    for ((i = ${#started[@]} - 1; i >= 0; i--)); do
        stop_pid "${started[i]}"
    done
    if [ "${BENCH_KEEP:-0}" = 1 ] || [ "$rc" -ne 0 ]; then
        log "logs kept in $tmp"
    else
        rm -rf "$tmp"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

used_ports=" "
# Prints a loopback TCP port that nothing listens on and that this script has
# not handed out yet.
free_port() {
    local p i
    for i in $(seq 200); do
        if command -v python3 >/dev/null; then
            p=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        else
            p=$((20000 + RANDOM % 40000))
            if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
                continue
            fi
        fi
        case $used_ports in *" $p "*) continue ;; esac
        used_ports="$used_ports$p "
        echo "$p"
        return 0
    done
    fail "no free port"
}

# Sends a four-letter word to ZooKeeper and prints the answer.
zk_4lw() {
    local port=$1 word=$2
    (
        exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
        printf '%s' "$word" >&3
        timeout 2 cat <&3
    ) 2>/dev/null
}

zk_port=$(free_port)
zk_dir=$tmp/zk
mkdir -p "$zk_dir/data" "$zk_dir/log"
cat >"$zk_dir/zoo.cfg" <<EOF
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$zk_dir/data
clientPort=$zk_port
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=*
forceSync=no
EOF
# start-foreground execs java, so $! is the server's PID.  Debian's
# environment file overrides ZOO_LOG_DIR; the later -D wins.
SERVER_JVMFLAGS="-Xmx512m -Dzookeeper.log.dir=$zk_dir/log" \
    ZOO_LOG_DIR="$zk_dir/log" JMXDISABLE=true \
    "$ZKSERVER" start-foreground "$zk_dir/zoo.cfg" \
    >"$zk_dir/server.out" 2>&1 </dev/null &
zk_pid=$!
started+=("$zk_pid")
log "ZooKeeper pid $zk_pid on 127.0.0.1:$zk_port"
for i in $(seq 120); do
    [ "$(zk_4lw "$zk_port" ruok)" = imok ] && break
    kill -0 "$zk_pid" 2>/dev/null || fail "ZooKeeper exited (see $zk_dir/server.out)"
    [ "$i" -lt 120 ] || fail "ZooKeeper not answering ruok after 60 s"
    sleep 0.5
done
zk_version=$(zk_4lw "$zk_port" srvr | sed -n 's/^Zookeeper version: \([^-,]*\).*/\1/p')

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' \
    --appendonly no --dir "$tmp" >"$tmp/redis.log" 2>&1 </dev/null &
redis_pid=$!
started+=("$redis_pid")
log "redis-server pid $redis_pid on 127.0.0.1:$redis_port"

zkresp_port=$(free_port)
"$ZKRESP" --port "$zkresp_port" --zk "127.0.0.1:$zk_port" --root /bench \
    --log-level warn >"$tmp/zkresp.log" 2>&1 </dev/null &
zkresp_pid=$!
started+=("$zkresp_pid")
log "zkresp pid $zkresp_pid on 127.0.0.1:$zkresp_port"

for i in $(seq 100); do
    [ "$(redis-cli -p "$redis_port" PING 2>/dev/null)" = PONG ] && break
    kill -0 "$redis_pid" 2>/dev/null || fail "redis-server exited (see $tmp/redis.log)"
    [ "$i" -lt 100 ] || fail "redis-server not answering PING"
    sleep 0.1
done
for i in $(seq 300); do
    if [ "$(redis-cli -p "$zkresp_port" PING 2>/dev/null)" = PONG ] &&
        redis-cli -p "$zkresp_port" INFO zookeeper 2>/dev/null |
        tr -d '\r' | grep -qx 'zk_state:connected'; then
        break
    fi
    kill -0 "$zkresp_pid" 2>/dev/null || fail "zkresp exited (see $tmp/zkresp.log)"
    [ "$i" -lt 300 ] || fail "zkresp not connected to ZooKeeper after 30 s"
    sleep 0.1
done

# ---------------------------------------------------------------- measure
# Runs one tool, checks the processes survived, prints its result line.
measure() {
    local name=$1 line
    shift
    log "$name"
    if ! line=$("$@" 2>"$tmp/$name.err"); then
        cat "$tmp/$name.err" >&2
        fail "$name: $*"
    fi
    [ -s "$tmp/$name.err" ] && sed "s/^/bench: $name: /" "$tmp/$name.err" >&2
    kill -0 "$zk_pid" 2>/dev/null || fail "ZooKeeper died during $name"
    kill -0 "$zkresp_pid" 2>/dev/null || fail "zkresp died during $name"
    kill -0 "$redis_pid" 2>/dev/null || fail "redis-server died during $name"
    [ "$(field "$line" ops)" != 0 ] || fail "$name: no operation completed"
    printf '%-15s %s\n' "$name" "$line" >>"$tmp/results"
    echo "$line"
}

# field LINE KEY: the value of KEY=value in a result line.
field() {
    awk -v k="$2" '{ for (i = 1; i <= NF; i++) { n = index($i, "=");
        if (n && substr($i, 1, n - 1) == k) { print substr($i, n + 1); exit } } }' <<<"$1"
}

zkraw=("$out/zkraw" --zk "127.0.0.1:$zk_port" --root /bench/raw)
resp=("$out/respbench" --seconds "$SECS" --warmup "$WARMUP")

if [ "$JVM_WARMUP" != 0 ]; then
    measure jvm-warmup "${zkraw[@]}" --conc 64 --seconds "$JVM_WARMUP" \
        --warmup 0 >/dev/null
fi
# Interleaved, so that drift (JIT, page cache) does not favour one side.
raw1=$(measure raw-c1 "${zkraw[@]}" --conc 1 --seconds "$SECS" \
    --warmup "$WARMUP" --pid zk="$zk_pid")
zr1=$(measure zkresp-c1 "${resp[@]}" --port "$zkresp_port" --mode pair \
    --conns 1 --pid zkresp="$zkresp_pid" --pid zk="$zk_pid")
raw64=$(measure raw-c64 "${zkraw[@]}" --conc 64 --seconds "$SECS" \
    --warmup "$WARMUP" --pid zk="$zk_pid")
zr64=$(measure zkresp-c64 "${resp[@]}" --port "$zkresp_port" --mode pair \
    --conns 64 --pid zkresp="$zkresp_pid" --pid zk="$zk_pid")
zg1=$(measure zkresp-get-c1 "${resp[@]}" --port "$zkresp_port" --mode get \
    --conns 1 --pid zkresp="$zkresp_pid" --pid zk="$zk_pid")
rg1=$(measure redis-get-c1 "${resp[@]}" --port "$redis_port" --mode get \
    --conns 1 --pid redis="$redis_pid")
zg64=$(measure zkresp-get-c64 "${resp[@]}" --port "$zkresp_port" --mode get \
    --conns 64 --pid zkresp="$zkresp_pid" --pid zk="$zk_pid")
rg64=$(measure redis-get-c64 "${resp[@]}" --port "$redis_port" --mode get \
    --conns 64 --pid redis="$redis_pid")

# ---------------------------------------------------------------- report
# calc EXPR: floating-point arithmetic with awk, printed with %.*f.
calc() { awk "BEGIN { printf \"%.${2:-2}f\", $1 }"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
# met VALUE OP LIMIT: "met" when VALUE OP LIMIT holds (OP: >= or <).
met() {
    awk -v v="$1" -v l="$3" -v op="$2" 'BEGIN {
        if (v !~ /^-?[0-9.]+$/) { print "NOT MET"; exit }
        ok = (op == ">=") ? (v + 0 >= l + 0) : (v + 0 < l + 0)
        print ok ? "met" : "NOT MET" }'
}

f() { field "$1" "$2"; }
ratio1=$(ratio "$(f "$zr1" ops_per_sec)" "$(f "$raw1" ops_per_sec)")
ratio64=$(ratio "$(f "$zr64" ops_per_sec)" "$(f "$raw64" ops_per_sec)")
overhead1=$(calc "$(f "$zr1" p50_us) - $(f "$raw1" p50_us)" 1)
errs=$(($(f "$zr1" errors) + $(f "$zr64" errors) + $(f "$raw1" errors) +
    $(f "$raw64" errors) + $(f "$zg1" errors) + $(f "$zg64" errors) +
    $(f "$rg1" errors) + $(f "$rg64" errors)))

{
    echo
    echo "zkresp bench: ${SECS} s per measurement after ${WARMUP} s warm-up;" \
        "$(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1));" \
        "ZooKeeper ${zk_version:-?} standalone, forceSync=no; $(redis-server --version | awk '{print $1, $3}')"
    echo
    echo "Lock pairs: zkresp = SET k tok NX PX 30000 + DELIFEQ k tok;" \
        "raw = libzookeeper_mt async create EPHEMERAL + delete(version 0), one session"
    printf '  %-4s %14s %12s %7s %18s %18s %14s %12s\n' \
        C "zkresp pairs/s" "raw pairs/s" ratio "zkresp p50/p99 us" \
        "raw p50/p99 us" "zkresp CPU/pr" "ZK CPU/pair"
    for c in 1 64; do
        if [ $c = 1 ]; then z=$zr1 r=$raw1 q=$ratio1; else z=$zr64 r=$raw64 q=$ratio64; fi
        printf '  %-4s %14.0f %12.0f %7s %18s %18s %11s us %9s us\n' \
            $c "$(f "$z" ops_per_sec)" "$(f "$r" ops_per_sec)" "$q" \
            "$(f "$z" p50_us)/$(f "$z" p99_us)" "$(f "$r" p50_us)/$(f "$r" p99_us)" \
            "$(f "$z" zkresp_cpu_us_per_op)" "$(f "$z" zk_cpu_us_per_op)"
    done
    echo "  (ZK CPU/pair is the ZooKeeper server's CPU during the zkresp run;" \
        "raw: $(f "$raw1" zk_cpu_us_per_op) us at C=1, $(f "$raw64" zk_cpu_us_per_op) us at C=64." \
        "raw client's own CPU/pair: $(f "$raw1" self_cpu_us_per_op) us at C=1," \
        "$(f "$raw64" self_cpu_us_per_op) us at C=64)"
    echo "  zkresp CPU time per pair: $(f "$zr1" zkresp_cpu_us_per_op) us at C=1," \
        "$(f "$zr64" zkresp_cpu_us_per_op) us at C=64 (CPU use $(f "$zr64" zkresp_cpu_pct)% of a core at C=64)"
    echo "  zkresp RSS: $(f "$zr64" zkresp_rss_kb) KiB after the C=64 run" \
        "($(f "$zg64" zkresp_rss_kb) KiB after the GET runs)"
    echo "  p50 overhead at C=1: $(f "$zr1" p50_us) - $(f "$raw1" p50_us) = $overhead1 us"
    echo
    echo "GET of a held lock (one key, SET NX PX 60000 before the run)"
    printf '  %-4s %14s %12s %7s %18s %18s %14s\n' \
        C "zkresp GET/s" "redis GET/s" ratio "zkresp p50/p99 us" \
        "redis p50/p99 us" "zkresp CPU/GET"
    for c in 1 64; do
        if [ $c = 1 ]; then z=$zg1 r=$rg1; else z=$zg64 r=$rg64; fi
        printf '  %-4s %14.0f %12.0f %7s %18s %18s %11s us\n' \
            $c "$(f "$z" ops_per_sec)" "$(f "$r" ops_per_sec)" \
            "$(ratio "$(f "$z" ops_per_sec)" "$(f "$r" ops_per_sec)")" \
            "$(f "$z" p50_us)/$(f "$z" p99_us)" "$(f "$r" p50_us)/$(f "$r" p99_us)" \
            "$(f "$z" zkresp_cpu_us_per_op)"
    done
    echo "  (load generator CPU: $(f "$zg64" self_cpu_pct)% against zkresp," \
        "$(f "$rg64" self_cpu_pct)% against redis-server at C=64; near 100% means" \
        "the generator, not the server, set the pace)"
    echo
    echo "Targets"
    printf '  %-44s %10s  %s\n' "pairs ratio zkresp/raw at C=64 >= 0.85" \
        "$ratio64" "$(met "$ratio64" ">=" 0.85)"
    printf '  %-44s %7s us  %s\n' "p50 overhead at C=1 < 150 us" \
        "$overhead1" "$(met "$overhead1" "<" 150)"
    if [ "$errs" -ne 0 ]; then
        echo
        echo "WARNING: $errs operations failed (unexpected replies); see the" \
            "messages above. Failed pairs are not counted in pairs/s."
    fi
    echo
    echo "Result lines:"
    sed 's/^/  /' "$tmp/results"
} | tee "$out/report.txt"
