#!/usr/bin/env bash
# make bench: the performance report of issue 2 (a report, not a test).
#
# Builds the two tools into build/bench/, starts its own ZooKeeper, zkresp and
# redis-server on free loopback ports in a temp dir, and measures, each for
# BENCH_SECONDS (default 5) after a BENCH_WARMUP (default 1) discarded warm-up:
#
#   lock pairs at C=1 and C=64    zkresp (respbench: SET NX PX 30000 + DELIFEQ)
#                                 vs raw libzookeeper_mt (zkraw: create
#                                 EPHEMERAL + delete at version 0); at C=64
#                                 also with ZooKeeper pinned to CPUs of its
#                                 own (1..n-1) and the client side (zkresp
#                                 and the tools) to CPU 0, with 2 CPUs or
#                                 more: a deployment's ensemble runs on
#                                 machines of its own
#   GET of a held lock, C=1, 64   zkresp vs redis-server
#   script pairs at C=1 and C=64  zkresp (respbench script modes, EVALSHA
#                                 after SCRIPT LOAD): redis-py's SET NX PX +
#                                 release script, Redisson's acquire + unlock
#                                 scripts and a lock without a TTL (SET NX +
#                                 DELIFEQ: a persistent node, its removal
#                                 checked and counted by a persistent mark;
#                                 measured in each round next to the plain
#                                 pair), Redisson's acquire + renewal
#                                 scripts, and a read-modify-write script on
#                                 one shared key (contention: at C=64 a second
#                                 zkresp on the same root runs 64 more
#                                 connections on that key; retries per
#                                 committed script from both sidecars'
#                                 /metrics, zkresp_lua_script_retries_total
#                                 and zkresp_lua_script_commits_total)
#
# and prints a table with the targets marked met / not met.  Exit status 0
# whenever every measurement ran (a missed target is not a failure); non-zero
# when something could not be built, started or measured.
#
# Environment:
#   BENCH_SECONDS     measured seconds per run (default 5)
#   BENCH_WARMUP      discarded warm-up seconds per run (default 1)
#   BENCH_ROUNDS      rounds of the pair measurements (default 3); each round
#                     runs raw and zkresp back to back, the report gives the
#                     median and the range over rounds
#   BENCH_JVM_WARMUP  seconds of raw load before the first measurement, so the
#                     ZooKeeper JIT is warm for everyone (default 10)
#   BENCH_HOLD_US     also measure zkresp pairs at C=64 with each lock held
#                     this long before release (default 2000; 0: skip), for
#                     the report's note on zkresp's owned-key cache
#   BENCH_PERF=1      after the measurements, profile zkresp with perf during
#                     one more C=64 pair run (not counted) and save the report
#                     in build/bench/perf-zkresp.txt
#   BENCH_RAW_RESOLVE_DELAY  zkraw's zoo_set_servers_resolution_delay (default
#                     -1: no getaddrinfo per IO-loop turn, as a tuned client
#                     would do; 0 is the library's default)
#   ZKRESP_BIN        the daemon to measure (default build/zkresp)
#   BENCH_KEEP=1      keep the temp dir (logs) after the run
#   BENCH_SECTIONS    the sections to run, out of "pairs handoff native
#                     policy" (default: all); e.g. BENCH_SECTIONS=native
#                     tests/bench/run.sh runs only the native lock section
#                     (the servers, the tools and the JVM warm-up still
#                     start as for a full run)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

SECS=${BENCH_SECONDS:-5}
RAW_RESOLVE_DELAY=${BENCH_RAW_RESOLVE_DELAY:--1}
WARMUP=${BENCH_WARMUP:-1}
ROUNDS=${BENCH_ROUNDS:-3}
JVM_WARMUP=${BENCH_JVM_WARMUP:-10}
ZKRESP=${ZKRESP_BIN:-$root/build/zkresp}
CC=${CC:-cc}
ZKSERVER=/usr/share/zookeeper/bin/zkServer.sh
out=$root/build/bench
SECTIONS=${BENCH_SECTIONS:-pairs handoff native policy}

log() { printf 'bench: %s\n' "$*" >&2; }
fail() {
    printf 'bench: FAILED: %s\n' "$*" >&2
    exit 1
}

# section NAME: true when NAME is among BENCH_SECTIONS.
section() { case " ${SECTIONS//,/ } " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
for s in ${SECTIONS//,/ }; do
    case $s in pairs | handoff | native | policy) ;;
    *) fail "BENCH_SECTIONS: unknown section $s (pairs handoff native policy)" ;;
    esac
done

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

rm -f "$out/report.txt" "$out/perf-zkresp.txt" "$out/perf-zkresp-flat.txt"

# ---------------------------------------------------------------- processes
tmp=$(mktemp -d "${TMPDIR:-/tmp}/zkresp-bench.XXXXXX")
started=() # PIDs of what this script started, stopped in reverse order
tool_pid=  # the measuring tool while it runs

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
    if [ -n "${tool_pid:-}" ]; then
        stop_pid "$tool_pid"
    fi
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
metrics_port=$(free_port)
"$ZKRESP" --port "$zkresp_port" --zk "127.0.0.1:$zk_port" --root /bench \
    --metrics-port "$metrics_port" \
    --log-level warn >"$tmp/zkresp.log" 2>&1 </dev/null &
zkresp_pid=$!
started+=("$zkresp_pid")
log "zkresp pid $zkresp_pid on 127.0.0.1:$zkresp_port"
# A second sidecar on the same root, used only for the contention runs.
zkresp2_port=$(free_port)
metrics2_port=$(free_port)
"$ZKRESP" --port "$zkresp2_port" --zk "127.0.0.1:$zk_port" --root /bench \
    --metrics-port "$metrics2_port" \
    --log-level warn >"$tmp/zkresp2.log" 2>&1 </dev/null &
zkresp2_pid=$!
started+=("$zkresp2_pid")
log "zkresp (second) pid $zkresp2_pid on 127.0.0.1:$zkresp2_port"

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
for i in $(seq 300); do
    if redis-cli -p "$zkresp2_port" INFO zookeeper 2>/dev/null |
        tr -d '\r' | grep -qx 'zk_state:connected'; then
        break
    fi
    kill -0 "$zkresp2_pid" 2>/dev/null || fail "second zkresp exited (see $tmp/zkresp2.log)"
    [ "$i" -lt 300 ] || fail "second zkresp not connected to ZooKeeper after 30 s"
    sleep 0.1
done

# script_stats: "commits retries" summed over both sidecars' /metrics, or
# "n/a n/a" when a sidecar does not export them.
script_stats() {
    local c=0 r=0 port m
    for port in "$metrics_port" "$metrics2_port"; do
        m=$(curl -s --max-time 5 "http://127.0.0.1:$port/metrics") || m=
        if ! grep -q '^zkresp_lua_script_retries_total ' <<<"$m"; then
            echo "n/a n/a"
            return
        fi
        c=$((c + $(awk '$1 == "zkresp_lua_script_commits_total" { printf "%d", $2 }' <<<"$m")))
        r=$((r + $(awk '$1 == "zkresp_lua_script_retries_total" { printf "%d", $2 }' <<<"$m")))
    done
    echo "$c $r"
}

# ---------------------------------------------------------------- measure
# measure NAME ROUND CMD...: runs one tool, checks that every process
# survived, and appends "NAME ROUND <result line>" to the results file.
# measure_ok_rc: an exit status other than 0 with which the tool still
# printed its result line (handoff --native: 3, a broken lock, which the
# section reports and then fails on).
measure_ok_rc=
measure() {
    local name=$1 round=$2 line rc=0
    shift 2
    log "$name (round $round)"
    # In the background, so that a signal's trap runs at once (bash defers
    # traps until a foreground command ends, but interrupts wait).
    "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
    tool_pid=$!
    wait "$tool_pid" || rc=$?
    tool_pid=
    if [ "$rc" -ne 0 ] && [ "$rc" != "$measure_ok_rc" ]; then
        cat "$tmp/$name.err" >&2
        fail "$name: $*"
    fi
    line=$(cat "$tmp/$name.out")
    if [ -s "$tmp/$name.err" ]; then
        sed "s/^/bench: $name: /" "$tmp/$name.err" >&2
    fi
    kill -0 "$zk_pid" 2>/dev/null || fail "ZooKeeper died during $name"
    kill -0 "$zkresp_pid" 2>/dev/null || fail "zkresp died during $name"
    kill -0 "$redis_pid" 2>/dev/null || fail "redis-server died during $name"
    case " $line " in
    *" ops=0 "*) fail "$name: no operation completed: $line" ;;
    esac
    printf '%s %s %s\n' "$name" "$round" "$line" >>"$tmp/results"
}

mntr=(--zk-mntr "127.0.0.1:$zk_port")
# stat_ticks FILE: the user and system clock ticks a /proc/.../stat file
# counts (a process's or one of its threads').
stat_ticks() {
    sed 's/.*) //' "$1" | awk '{ print $12 + $13 }'
}
# cpu_ticks [PID...]: "machine-busy ours" in clock ticks, where ours is the
# CPU time of the PIDs (default: ZooKeeper, zkresp, redis-server) and this
# script's finished children (the tools).  The difference over the run is
# what other work took.
cpu_ticks() {
    local busy ours=0 pid
    busy=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat)
    [ $# -gt 0 ] || set -- "$zk_pid" "$zkresp_pid" "$redis_pid"
    for pid in "$@"; do
        ours=$((ours + $(stat_ticks "/proc/$pid/stat")))
    done
    ours=$((ours + $(sed 's/.*) //' "/proc/$$/stat" | awk '{ print $14 + $15 }')))
    echo "$busy $ours"
}
read -r busy0 ours0 <<<"$(cpu_ticks)"
t_start=$(date +%s.%N)
zkraw=("$out/zkraw" --zk "127.0.0.1:$zk_port" --root /bench/raw "${mntr[@]}"
    --resolve-delay "$RAW_RESOLVE_DELAY")
resp=("$out/respbench" --seconds "$SECS" --warmup "$WARMUP")
zkresp_pair=("${resp[@]}" --port "$zkresp_port" --mode pair
    --pid zkresp="$zkresp_pid" --pid zk="$zk_pid" "${mntr[@]}")
: >"$tmp/results"

if [ "$JVM_WARMUP" != 0 ]; then
    measure jvm-warmup 0 "${zkraw[@]}" --conc 64 --seconds "$JVM_WARMUP" \
        --warmup 0
fi
# The pair, GET, script and contention measurements (section pairs; the
# blocks of a section are not indented, each ends at its "fi # section").
if section pairs; then
# pin / unpin: ZooKeeper's threads on CPUs 1..n-1 and zkresp's on CPU 0 (the
# tools are started on CPU 0), then back on every CPU.  Where the CPUs cannot
# be chosen (one CPU, no taskset, a cpuset that refuses), the pinned runs are
# left out of the report.
ncpu=$(nproc)
pinning=0
if [ "$ncpu" -ge 2 ] && command -v taskset >/dev/null; then pinning=1; fi
pin() {
    taskset -a -p -c "1-$((ncpu - 1))" "$zk_pid" >/dev/null 2>&1 &&
        taskset -a -p -c 0 "$zkresp_pid" >/dev/null 2>&1
}
unpin() {
    taskset -a -p -c "0-$((ncpu - 1))" "$zk_pid" >/dev/null 2>&1 || true
    taskset -a -p -c "0-$((ncpu - 1))" "$zkresp_pid" >/dev/null 2>&1 || true
}

# Raw and zkresp back to back in each round, so that drift (the ZooKeeper
# JIT, other load on the machine) hits both sides alike.
for ((r = 1; r <= ROUNDS; r++)); do
    for c in 1 64; do
        measure "raw-c$c" "$r" "${zkraw[@]}" --conc "$c" --seconds "$SECS" \
            --warmup "$WARMUP" --pid zk="$zk_pid"
        measure "zkresp-c$c" "$r" "${zkresp_pair[@]}" --conns "$c"
        measure "script-c$c" "$r" "${zkresp_pair[@]}" --conns "$c" \
            --mode script-pair --prefix bench:sp:
        measure "redisson-c$c" "$r" "${zkresp_pair[@]}" --conns "$c" \
            --mode redisson-pair --prefix bench:rp:
        measure "nottl-c$c" "$r" "${zkresp_pair[@]}" --conns "$c" \
            --px 0 --prefix bench:nt:
    done
    if [ "$pinning" = 1 ] && ! pin; then
        unpin
        pinning=0
        log "pinning: taskset refused, no pinned runs"
    fi
    if [ "$pinning" = 1 ]; then
        measure raw-c64-pin "$r" taskset -c 0 "${zkraw[@]}" --conc 64 \
            --seconds "$SECS" --warmup "$WARMUP" --pid zk="$zk_pid"
        measure zkresp-c64-pin "$r" taskset -c 0 "${zkresp_pair[@]}" --conns 64
        unpin
    fi
done
for c in 1 64; do
    measure "renew-c$c" 1 "${zkresp_pair[@]}" --conns "$c" \
        --mode redisson-renew --prefix bench:rr:
    measure "counter-c$c" 1 "${zkresp_pair[@]}" --conns "$c" \
        --mode counter --prefix bench:ctr:
done
# Contention across sidecars: 64 connections on each of the two sidecars
# run the counter script on the same key; the measured tool is the first
# sidecar's, the second's runs alongside it (its result is kept in
# counter2.out).  Commits and retries are counted over the whole window.
read -r commits0 retries0 <<<"$(script_stats)"
"${resp[@]}" --port "$zkresp2_port" --mode counter --conns 64 \
    --prefix bench:ctr2: --pid zkresp2="$zkresp2_pid" \
    >"$tmp/counter2.out" 2>"$tmp/counter2.err" &
counter2_pid=$!
started+=("$counter2_pid")
measure counter2-c64 1 "${zkresp_pair[@]}" --conns 64 --mode counter \
    --prefix bench:ctr2:
wait "$counter2_pid" || fail "second counter run: $(cat "$tmp/counter2.err")"
read -r commits1 retries1 <<<"$(script_stats)"
counter2_other=$(awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^ops_per_sec=/) { split($i, e, "="); print e[2] } }' "$tmp/counter2.out")
# "ratio re-runs commits", or "n/a n/a n/a" without the metrics.
read -r retry_ratio retry_n commit_n <<<"$(awk -v c0="$commits0" -v c1="$commits1" \
    -v r0="$retries0" -v r1="$retries1" 'BEGIN {
        if (c0 == "n/a" || c1 == "n/a" || c1 - c0 <= 0) print "n/a n/a n/a"
        else printf "%.2f %d %d\n", (r1 - r0) / (c1 - c0), r1 - r0, c1 - c0 }')"
HOLD_US=${BENCH_HOLD_US:-2000}
if [ "$HOLD_US" != 0 ]; then
    measure zkresp-c64-hold 1 "${zkresp_pair[@]}" --conns 64 \
        --hold-us "$HOLD_US"
fi
for c in 1 64; do
    measure "zkresp-get-c$c" 1 "${resp[@]}" --port "$zkresp_port" --mode get \
        --conns "$c" --pid zkresp="$zkresp_pid" --pid zk="$zk_pid" "${mntr[@]}"
    measure "redis-get-c$c" 1 "${resp[@]}" --port "$redis_port" --mode get \
        --conns "$c" --pid redis="$redis_pid"
done

if [ "${BENCH_PERF:-0}" = 1 ]; then
    if command -v perf >/dev/null; then
        log "perf: profiling zkresp during one more C=64 pair run"
        perf record -F 999 -g -p "$zkresp_pid" -o "$tmp/perf.data" \
            -- sleep "$((${SECS%.*} + ${WARMUP%.*}))" \
            >"$tmp/perf.out" 2>&1 &
        perf_pid=$!
        started+=("$perf_pid")
        measure zkresp-c64-perf 0 "${zkresp_pair[@]}" --conns 64
        wait "$perf_pid" || true
        perf report -i "$tmp/perf.data" --stdio --no-children \
            --percent-limit 0.5 >"$out/perf-zkresp.txt" 2>/dev/null || true
        perf report -i "$tmp/perf.data" --stdio --no-children -g none \
            --sort dso,symbol --percent-limit 0.5 \
            >"$out/perf-zkresp-flat.txt" 2>/dev/null || true
    else
        log "perf: not installed, skipped"
    fi
fi

read -r busy1 ours1 <<<"$(cpu_ticks)"
t_end=$(date +%s.%N)
others_pct=$(awk -v b=$((busy1 - busy0)) -v o=$((ours1 - ours0)) \
    -v t0="$t_start" -v t1="$t_end" -v hz="$(getconf CLK_TCK)" -v n="$(nproc)" \
    'BEGIN { x = (b - o) / hz / (t1 - t0) / n * 100; printf "%.0f", x < 0 ? 0 : x }')
fi # section pairs

# ---------------------------------------------------------------- report
# stat MODE A B KEY: over the rounds, "median min max" of KEY in run A
# (MODE value), of A/B per round (MODE ratio) or of A-B per round (MODE diff);
# "n/a n/a n/a" when there is nothing to compute.
stat() {
    awk -v mode="$1" -v a="$2" -v b="$3" -v k="$4" '
    function val(i, n) {
        for (i = 3; i <= NF; i++) {
            n = index($i, "=")
            if (n && substr($i, 1, n - 1) == k)
                return substr($i, n + 1)
        }
        return ""
    }
    $1 == a { A[$2] = val() }
    $1 == b { B[$2] = val() }
    END {
        n = 0
        for (r in A) {
            if (A[r] == "" || A[r] + 0 < 0)
                continue
            if (mode == "value")
                x = A[r]
            else if (!(r in B) || B[r] == "")
                continue
            else if (mode == "ratio") {
                if (B[r] <= 0)
                    continue
                x = A[r] / B[r]
            } else
                x = A[r] - B[r]
            v[++n] = x + 0
        }
        if (n == 0) {
            print "n/a n/a n/a"
            exit
        }
        for (i = 2; i <= n; i++) {
            x = v[i]
            for (j = i - 1; j >= 1 && v[j] > x; j--)
                v[j + 1] = v[j]
            v[j + 1] = x
        }
        med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
        print med, v[1], v[n]
    }' "$tmp/results"
}
# num FORMAT VALUE: printf for numbers, "n/a" passed through.
num() {
    awk -v f="$1" -v v="$2" 'BEGIN {
        if (v ~ /^-?[0-9.]+(e[-+]?[0-9]+)?$/) printf f, v; else printf "n/a" }'
}
# med A KEY [FORMAT]: the median of KEY over A's runs, formatted.
med() {
    local m
    read -r m _ <<<"$(stat value "$1" - "$2")"
    num "${3:-%.1f}" "$m"
}
# met VALUE OP LIMIT: "met" when VALUE OP LIMIT holds (OP: >= or <).
met() {
    awk -v v="$1" -v l="$3" -v op="$2" 'BEGIN {
        if (v !~ /^-?[0-9.]+$/) { print "NOT MET"; exit }
        ok = (op == ">=") ? (v + 0 >= l + 0) : (v + 0 < l + 0)
        print ok ? "met" : "NOT MET" }'
}
# reply_target Z R LATER: the verdict on a wake-up p50 Z from the release's
# reply against the raw recipe's R: within 2x when R is positive; when R is
# at or before the reply (its event comes with the delete's reply), met only
# if Z is too, else "NOT MET (LATER)".
reply_target() {
    awk -v z="$1" -v r="$2" -v later="$3" 'BEGIN {
        if (z !~ /^-?[0-9.]+$/ || r !~ /^-?[0-9.]+$/) print "NOT MET (n/a)"
        else if (r > 0) print (z <= 2 * r ? "met" : "NOT MET") " (ratio " sprintf("%.2f", z / r) ")"
        else print (z <= 0 ? "met (no later than the reply, as the recipe)" : "NOT MET (" later ")") }'
}

if section pairs; then
read -r ratio64 ratio64_lo ratio64_hi <<<"$(stat ratio zkresp-c64 raw-c64 ops_per_sec)"
read -r pratio64 pratio64_lo pratio64_hi <<<"$(stat ratio zkresp-c64-pin raw-c64-pin ops_per_sec)"
read -r sratio64 sratio64_lo sratio64_hi <<<"$(stat ratio script-c64 zkresp-c64 ops_per_sec)"
read -r rratio64 rratio64_lo rratio64_hi <<<"$(stat ratio redisson-c64 zkresp-c64 ops_per_sec)"
read -r over1 over1_lo over1_hi <<<"$(stat diff zkresp-c1 raw-c1 p50_us)"
errs=$(awk '{ for (i = 3; i <= NF; i++) if ($i ~ /^errors=/) { split($i, e, "="); s += e[2] } }
    END { print s + 0 }' "$tmp/results")
rss_pairs=$(stat value zkresp-c64 - zkresp_rss_kb | awk '{ print $3 }')

{
    echo
    echo "zkresp bench: ${SECS} s per measurement after ${WARMUP} s warm-up," \
        "pairs: median of $ROUNDS rounds"
    echo "  $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1));" \
        "ZooKeeper ${zk_version:-?} standalone, forceSync=no;" \
        "$(redis-server --version | awk '{ print $1, $3 }'); repo at $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet HEAD -- sidecar gateway scripts 2>/dev/null || echo ' + local changes')"
    echo "  CPU time outside the measured processes during the run:" \
        "${others_pct}% of the machine (other work, and kernel time not" \
        "charged to a process; a large value makes the numbers noisy)"
    echo
    echo "Lock pairs. zkresp: SET k tok NX PX 30000 + DELIFEQ k tok, C connections."
    echo "            raw: libzookeeper_mt, one session, C pairs in flight," \
        "create EPHEMERAL + delete(version 0), resolution delay $RAW_RESOLVE_DELAY."
    printf '  %-3s %14s %12s %18s %18s %18s\n' C "zkresp pairs/s" \
        "raw pairs/s" "ratio (range)" "zkresp p50/p99 us" "raw p50/p99 us"
    for c in 1 64 $([ "$pinning" = 1 ] && echo 64-pin); do
        read -r q lo hi <<<"$(stat ratio "zkresp-c$c" "raw-c$c" ops_per_sec)"
        printf '  %-3s %14s %12s %18s %18s %18s\n' "${c%-pin}" \
            "$(med "zkresp-c$c" ops_per_sec %.0f)" "$(med "raw-c$c" ops_per_sec %.0f)" \
            "$(num %.2f "$q") ($(num %.2f "$lo")-$(num %.2f "$hi"))" \
            "$(med "zkresp-c$c" p50_us %.0f)/$(med "zkresp-c$c" p99_us %.0f)" \
            "$(med "raw-c$c" p50_us %.0f)/$(med "raw-c$c" p99_us %.0f)"
    done
    if [ "$pinning" = 1 ]; then
        zk_cpus="CPUs 1-$((ncpu - 1))"
        [ "$ncpu" -gt 2 ] || zk_cpus="CPU 1"
        echo "  (the second C=64 row: ZooKeeper alone on $zk_cpus," \
            "zkresp and the load generator on CPU 0, as with an ensemble on" \
            "machines of its own; the rows above share every CPU among all)"
    fi
    echo
    echo "  CPU time per pair (us)   zkresp   raw client   ZooKeeper(zkresp run)" \
        "  ZooKeeper(raw run)   load generator"
    for c in 1 64 $([ "$pinning" = 1 ] && echo 64-pin); do
        printf '  %-24s %7s %12s %23s %20s %16s\n' "C=${c/-pin/, pinned}" \
            "$(med "zkresp-c$c" zkresp_cpu_us_per_op)" \
            "$(med "raw-c$c" self_cpu_us_per_op)" \
            "$(med "zkresp-c$c" zk_cpu_us_per_op)" \
            "$(med "raw-c$c" zk_cpu_us_per_op)" \
            "$(awk -v p="$(med "zkresp-c$c" self_cpu_pct)" -v o="$(med "zkresp-c$c" ops_per_sec)" \
                'BEGIN { if (o > 0) printf "%.1f", p * 1e4 / o; else print "n/a" }')"
    done
    echo "  ZooKeeper requests per pair (server's mntr zk_packets_received):" \
        "zkresp $(med zkresp-c1 zk_reqs_per_op %.2f) at C=1," \
        "$(med zkresp-c64 zk_reqs_per_op %.2f) at C=64; raw" \
        "$(med raw-c1 zk_reqs_per_op %.2f) / $(med raw-c64 zk_reqs_per_op %.2f)"
    if [ "$HOLD_US" != 0 ]; then
        echo "  zkresp at C=64 with each lock held ${HOLD_US} us (hold not in" \
            "the latency): $(med zkresp-c64-hold ops_per_sec %.0f) pairs/s," \
            "p50/p99 $(med zkresp-c64-hold p50_us %.0f)/$(med zkresp-c64-hold p99_us %.0f) us," \
            "$(med zkresp-c64-hold zk_reqs_per_op %.2f) ZooKeeper requests and" \
            "$(med zkresp-c64-hold zkresp_cpu_us_per_op) us zkresp CPU per pair"
    fi
    echo "  zkresp CPU use at C=64: $(med zkresp-c64 zkresp_cpu_pct)% of one core;" \
        "RSS $(num %.0f "$rss_pairs") KiB (max over the C=64 pair runs)," \
        "$(med zkresp-get-c64 zkresp_rss_kb %.0f) KiB after the GET runs"
    echo "  p50 overhead at C=1 = zkresp p50 - raw p50 (median over rounds)"
    echo
    echo "GET of a held lock (one key, SET NX PX 60000 before the run), 1 run each"
    printf '  %-3s %14s %12s %7s %18s %18s %15s\n' C "zkresp GET/s" \
        "redis GET/s" ratio "zkresp p50/p99 us" "redis p50/p99 us" \
        "zkresp CPU/GET"
    for c in 1 64; do
        read -r q _ <<<"$(stat ratio "zkresp-get-c$c" "redis-get-c$c" ops_per_sec)"
        printf '  %-3s %14s %12s %7s %18s %18s %12s us\n' "$c" \
            "$(med "zkresp-get-c$c" ops_per_sec %.0f)" \
            "$(med "redis-get-c$c" ops_per_sec %.0f)" "$(num %.2f "$q")" \
            "$(med "zkresp-get-c$c" p50_us %.0f)/$(med "zkresp-get-c$c" p99_us %.0f)" \
            "$(med "redis-get-c$c" p50_us %.0f)/$(med "redis-get-c$c" p99_us %.0f)" \
            "$(med "zkresp-get-c$c" zkresp_cpu_us_per_op)"
    done
    echo "  ZooKeeper requests per GET through zkresp:" \
        "$(med zkresp-get-c1 zk_reqs_per_op %.2f) at C=1," \
        "$(med zkresp-get-c64 zk_reqs_per_op %.2f) at C=64 (concurrent GETs of one" \
        "key share reads)"
    echo "  load generator CPU at C=64: $(med zkresp-get-c64 self_cpu_pct)% (zkresp run)," \
        "$(med redis-get-c64 self_cpu_pct)% (redis-server run), of one core; near 100%" \
        "means the generator set the pace"
    echo
    echo "Script pairs through zkresp (EVALSHA after SCRIPT LOAD), each op two"
    echo "requests; ratio = script pairs/s / plain pairs/s (SET NX PX + DELIFEQ)"
    echo "in the same round."
    printf '  %-46s %-3s %10s %18s %18s %14s\n' "pair" C "pairs/s" \
        "ratio (range)" "p50/p99 us" "ZK reqs/pair"
    for c in 1 64; do
        for row in "zkresp|SET NX PX + DELIFEQ (plain)" \
            "script|SET NX PX + release script (redis-py)" \
            "redisson|acquire + unlock scripts (Redisson)" \
            "nottl|SET NX + DELIFEQ, no TTL (persistent)"; do
            name=${row%%|*}
            if [ "$name" = zkresp ]; then
                q=1 lo=1 hi=1
            else
                read -r q lo hi <<<"$(stat ratio "$name-c$c" "zkresp-c$c" ops_per_sec)"
            fi
            printf '  %-46s %-3s %10s %18s %18s %14s\n' "${row#*|}" "$c" \
                "$(med "$name-c$c" ops_per_sec %.0f)" \
                "$(num %.2f "$q") ($(num %.2f "$lo")-$(num %.2f "$hi"))" \
                "$(med "$name-c$c" p50_us %.0f)/$(med "$name-c$c" p99_us %.0f)" \
                "$(med "$name-c$c" zk_reqs_per_op %.2f)"
        done
    done
    for c in 1 64; do
        printf '  %-46s %-3s %10s %18s %18s %14s\n' \
            "acquire + renewal scripts (Redisson watchdog)" "$c" \
            "$(med "renew-c$c" ops_per_sec %.0f)" "1 run" \
            "$(med "renew-c$c" p50_us %.0f)/$(med "renew-c$c" p99_us %.0f)" \
            "$(med "renew-c$c" zk_reqs_per_op %.2f)"
    done
    echo
    echo "Contention: C connections run one read-modify-write script (GET, +1,"
    echo "SET) on ONE shared key; every script commits (a conflict re-runs it)."
    printf '  %-18s %12s %18s %22s\n' C "scripts/s" "p50/p99 us" "ZK reqs/committed"
    for c in 1 64; do
        printf '  %-18s %12s %18s %22s\n' "$c, one sidecar" "$(med "counter-c$c" ops_per_sec %.0f)" \
            "$(med "counter-c$c" p50_us %.0f)/$(med "counter-c$c" p99_us %.0f)" \
            "$(med "counter-c$c" zk_reqs_per_op %.2f)"
    done
    printf '  %-18s %12s %18s %22s\n' "64 + 64, two" \
        "$(med counter2-c64 ops_per_sec %.0f)+$(num %.0f "${counter2_other:-n/a}")" \
        "$(med counter2-c64 p50_us %.0f)/$(med counter2-c64 p99_us %.0f)" \
        "-"
    echo "  Retries per committed script with 64 connections on each of two"
    echo "  sidecars: $retry_ratio ($retry_n re-runs over $commit_n commits" \
        "of every command, both sidecars'"
    echo "  zkresp_lua_script_retries_total / _commits_total). One sidecar's"
    echo "  scripts on a key wait in its local queue and do not conflict."
    echo
    echo "Targets"
    printf '  %-42s %9s   %-8s (range over rounds %s..%s)\n' \
        "pairs ratio zkresp/raw at C=64 >= 0.85" "$(num %.2f "$ratio64")" \
        "$(met "$ratio64" ">=" 0.85)" "$(num %.2f "$ratio64_lo")" \
        "$(num %.2f "$ratio64_hi")"
    if [ "$pinning" = 1 ]; then
        printf '  %-42s %9s   %-8s (range over rounds %s..%s)\n' \
            "  the same, ZooKeeper on CPUs of its own" "$(num %.2f "$pratio64")" \
            "$(met "$pratio64" ">=" 0.85)" "$(num %.2f "$pratio64_lo")" \
            "$(num %.2f "$pratio64_hi")"
    fi
    printf '  %-42s %9s   %-8s (range over rounds %s..%s)\n' \
        "script pair/plain pair at C=64 >= 0.75" "$(num %.2f "$sratio64")" \
        "$(met "$sratio64" ">=" 0.75)" "$(num %.2f "$sratio64_lo")" \
        "$(num %.2f "$sratio64_hi")"
    printf '  %-42s %9s   %-8s (range over rounds %s..%s)\n' \
        "Redisson pair/plain pair at C=64 >= 0.75" "$(num %.2f "$rratio64")" \
        "$(met "$rratio64" ">=" 0.75)" "$(num %.2f "$rratio64_lo")" \
        "$(num %.2f "$rratio64_hi")"
    printf '  %-42s %9s   %-8s (range over rounds %s..%s)\n' \
        "p50 overhead at C=1 < 150 us" "$(num %.0f "$over1") us" \
        "$(met "$over1" "<" 150)" "$(num %.0f "$over1_lo")" \
        "$(num %.0f "$over1_hi")"
    if [ "$errs" -ne 0 ]; then
        echo
        echo "WARNING: $errs operations failed (unexpected replies, see the" \
            "messages above); failed pairs are not counted in pairs/s."
    fi
    if [ -s "$out/perf-zkresp-flat.txt" ]; then
        echo
        echo "perf profile of zkresp at C=64 (top symbols; full report in" \
            "build/bench/perf-zkresp.txt):"
        grep -v '^#' "$out/perf-zkresp-flat.txt" | grep -v '^$' |
            sed 's/[[:space:]-]*$//' | head -25 |
            sed 's/^/  /'
    fi
    echo
    echo "Result lines (name round result):"
    sed 's/^/  /' "$tmp/results"
} | tee "$out/report.txt"
fi # section pairs

# ================================================================ handoff
# Lock handoff and wake-up (issue 4), appended to the report: Redisson-style
# waiters on ONE hash lock (tests/bench/handoff.c: acquire script, SUBSCRIBE
# to the lock's channel, wait for the unlock script's message), 4 on each
# sidecar, 8 on one sidecar, 8 on redis-server; next to the raw ZooKeeper
# lock recipe (sequential ephemeral nodes, watch the predecessor; 8 waiters,
# one session each).  The raw run and the 4+4 run go back to back in each of
# BENCH_HANDOFF_ROUNDS rounds (default BENCH_ROUNDS).  ZooKeeper watch events
# per unlock from the server's mntr (and from the sidecars' /metrics when
# they export a *watch*_total counter) at 2+2, 4+4 and 2+6 waiters.
# Environment: BENCH_HANDOFF_ROUNDS, BENCH_HANDOFF_HOLD_US (default 20).
HO_ROUNDS=${BENCH_HANDOFF_ROUNDS:-$ROUNDS}
HO_HOLD_US=${BENCH_HANDOFF_HOLD_US:-20}
# Redisson's unlock leaves a latch key that expires 3 s later (a ZooKeeper
# delete and its watch events): a warm-up of 3.5 s at least puts this run's
# own expiries, and none of the previous run's, in the measured period.
HO_WARMUP=$(awk -v w="$WARMUP" 'BEGIN { print (w < 3.5) ? 3.5 : w }')
# shellcheck disable=SC2086,SC2046
$CC $CFLAGS_BENCH $(pkg-config --cflags hiredis 2>/dev/null) \
    tests/bench/handoff.c -o "$out/handoff" \
    $(pkg-config --libs hiredis 2>/dev/null || echo -lhiredis) \
    -lzookeeper_mt -lpthread || fail "building handoff"

# ho_scrape: both sidecars' /metrics, one after the other (one read of each
# for all the counters below).
ho_scrape() {
    local port
    for port in "$metrics_port" "$metrics2_port"; do
        curl -s --max-time 5 "http://127.0.0.1:$port/metrics" || true
    done
}
# ho_metric RE SCRAPE: the sum in SCRAPE (ho_scrape's text) of the counters
# whose name matches RE, or n/a when neither sidecar exports one.
ho_metric() {
    awk -v re="$1" '$1 ~ re { f = 1; t += $NF }
        END { if (f) printf "%d\n", t; else print "n/a" }' <<<"$2"
}
ho_watch_re='^zkresp_[a-z_]*watch[a-z_]*_total($|[{])'
# ho_ops SCRAPE: "op=N ..." summed over both sidecars: the requests each
# sent to ZooKeeper by operation, and its reads ahead as op "ahead".
ho_ops() {
    awk '
        $1 ~ /^zkresp_zookeeper_requests_total[{]/ {
            op = $1; sub(/.*op="/, "", op); sub(/".*/, "", op); n[op] += $NF }
        $1 == "zkresp_zookeeper_reads_ahead_total" { n["ahead"] += $NF }
        END { k = split("create children get ahead exists multi delete set sync get_acl", o, " ")
              for (i = 1; i <= k; i++) printf "%s=%d ", o[i], n[o[i]] }' <<<"$1"
}
# ho_took SCRAPE: "op=SUM:COUNT ..." summed over both sidecars: the time
# their answered requests took, from sending to the answer (seconds), and
# as op "wait" the time answers then waited for the loop thread.
ho_took() {
    awk '
        $1 ~ /^zkresp_zookeeper_request_duration_seconds_(sum|count)[{]/ {
            op = $1; sub(/.*op="/, "", op); sub(/".*/, "", op)
            if ($1 ~ /_sum[{]/) t[op] += $NF; else n[op] += $NF }
        $1 == "zkresp_zookeeper_answer_wait_seconds_sum" { t["wait"] += $NF }
        $1 == "zkresp_zookeeper_answer_wait_seconds_count" { n["wait"] += $NF }
        END { k = split("create children get multi delete set exists sync get_acl wait", o, " ")
              for (i = 1; i <= k; i++) if (n[o[i]] > 0) printf "%s=%.9f:%d ", o[i], t[o[i]], n[o[i]] }' <<<"$1"
}
ho_madeup_re='^zkresp_lua_pubsub_made_up_total$'
# ho_measure NAME ROUND ARGS...: one handoff run through measure; appended
# to its result line: the sidecars' watch counters per release (whole run)
# and the messages they made up (pubsub made_up_total).
ho_measure() {
    local name=$1 round=$2 s w0 w1 m0 m1 o0 o1 t0 t1 rel
    shift 2
    s=$(ho_scrape)
    w0=$(ho_metric "$ho_watch_re" "$s")
    m0=$(ho_metric "$ho_madeup_re" "$s")
    o0=$(ho_ops "$s")
    t0=$(ho_took "$s")
    measure "$name" "$round" "$out/handoff" --seconds "$SECS" \
        --warmup "$HO_WARMUP" --hold-us "$HO_HOLD_US" "$@"
    kill -0 "$zkresp2_pid" 2>/dev/null || fail "second zkresp died during $name"
    s=$(ho_scrape)
    w1=$(ho_metric "$ho_watch_re" "$s")
    m1=$(ho_metric "$ho_madeup_re" "$s")
    o1=$(ho_ops "$s")
    t1=$(ho_took "$s")
    rel=$(tail -1 "$tmp/results" | tr ' ' '\n' | sed -n 's/^releases=//p')
    awk -v a="$w0" -v b="$w1" -v r="${rel:-0}" -v c="$m0" -v d="$m1" \
        -v o0="$o0" -v o1="$o1" -v t0="$t0" -v t1="$t1" 'BEGIN {
        if (a == "n/a" || b == "n/a" || r <= 0) w = "n/a"
        else w = sprintf("%.2f", (b - a) / r)
        m = (c == "n/a" || d == "n/a") ? "n/a" : d - c
        # requests per release by operation, those sent at all (whole run)
        split(o0, x, " "); for (i in x) { split(x[i], kv, "="); before[kv[1]] = kv[2] }
        n = split(o1, y, " "); ops = ""
        for (i = 1; i <= n; i++) {
            split(y[i], kv, "=")
            if (r > 0 && (kv[2] - before[kv[1]]) / r >= 0.005)
                ops = ops sprintf("%s%s:%.2f", ops == "" ? "" : ",", kv[1], (kv[2] - before[kv[1]]) / r)
        }
        # mean time of each operation answered during the run, in us
        split(t0, x, " "); for (i in x) { split(x[i], kv, "[=:]"); ts[kv[1]] = kv[2]; tn[kv[1]] = kv[3] }
        n = split(t1, y, " "); took = ""
        for (i = 1; i <= n; i++) {
            split(y[i], kv, "[=:]")
            if (kv[3] - tn[kv[1]] > 0)
                took = took sprintf("%s%s:%.0f", took == "" ? "" : ",", kv[1],
                                    1e6 * (kv[2] - ts[kv[1]]) / (kv[3] - tn[kv[1]]))
        }
        printf "sidecar_watch_per_release=%s sidecar_made_up=%s sidecar_zk_per_release=%s sidecar_zk_mean_us=%s\n", w, m, ops == "" ? "n/a" : ops, took == "" ? "n/a" : took
    }' >"$tmp/$name.sw"
    sed -i "\$s|\$| $(cat "$tmp/$name.sw")|" "$tmp/results"
}
# ho_ticks: "machine-busy ours" in clock ticks, as cpu_ticks, with the
# second sidecar among ours.
ho_ticks() {
    cpu_ticks "$zk_pid" "$zkresp_pid" "$zkresp2_pid" "$redis_pid"
}
ho_zk=(--zk-mntr "127.0.0.1:$zk_port" --pid zk="$zk_pid")
ho_sides=(--pid zkresp="$zkresp_pid" --pid zkresp2="$zkresp2_pid")
if section handoff; then
read -r ho_busy0 ho_ours0 <<<"$(ho_ticks)"
ho_t0=$(date +%s.%N)
for ((r = 1; r <= HO_ROUNDS; r++)); do
    ho_measure ho-raw "$r" --zk "127.0.0.1:$zk_port" --waiters 8 \
        --root /bench/handoff-raw --resolve-delay "$RAW_RESOLVE_DELAY" \
        "${ho_zk[@]}"
    ho_measure ho-zk44 "$r" --side "$zkresp_port:4" --side "$zkresp2_port:4" \
        --key "bench:ho:44:$r" "${ho_zk[@]}" "${ho_sides[@]}"
done
ho_measure ho-zk8 1 --side "$zkresp_port:8" --key bench:ho:8 "${ho_zk[@]}" \
    "${ho_sides[@]}"
ho_measure ho-redis 1 --side "$redis_port:8" --key bench:ho:redis \
    --pid redis="$redis_pid"
ho_measure ho-zk22 1 --side "$zkresp_port:2" --side "$zkresp2_port:2" \
    --key bench:ho:22 "${ho_zk[@]}" "${ho_sides[@]}"
ho_measure ho-zk26 1 --side "$zkresp_port:2" --side "$zkresp2_port:6" \
    --key bench:ho:26 "${ho_zk[@]}" "${ho_sides[@]}"

read -r ho_busy1 ho_ours1 <<<"$(ho_ticks)"
ho_others=$(awk -v b=$((ho_busy1 - ho_busy0)) -v o=$((ho_ours1 - ho_ours0)) \
    -v t0="$ho_t0" -v t1="$(date +%s.%N)" -v hz="$(getconf CLK_TCK)" -v n="$(nproc)" \
    'BEGIN { x = (b - o) / hz / (t1 - t0) / n * 100; printf "%.0f", x < 0 ? 0 : x }')
fi # section handoff

# ho_stat MODE A B KEY: as stat, for values that may be negative (only a
# non-number is missing): "median min max" of KEY in A (MODE value) or of
# A/B per round (MODE ratio, only where B > 0).
ho_stat() {
    awk -v mode="$1" -v a="$2" -v b="$3" -v k="$4" '
    function val(i, n) {
        for (i = 3; i <= NF; i++) {
            n = index($i, "=")
            if (n && substr($i, 1, n - 1) == k)
                return substr($i, n + 1)
        }
        return ""
    }
    function isnum(x) { return x ~ /^-?[0-9.]+(e[-+]?[0-9]+)?$/ }
    $1 == a { A[$2] = val() }
    $1 == b { B[$2] = val() }
    END {
        n = 0
        for (r in A) {
            if (!isnum(A[r]))
                continue
            if (mode == "value")
                x = A[r]
            else if (!(r in B) || !isnum(B[r]) || B[r] <= 0)
                continue
            else
                x = A[r] / B[r]
            v[++n] = x + 0
        }
        if (n == 0) {
            print "n/a n/a n/a"
            exit
        }
        for (i = 2; i <= n; i++) {
            x = v[i]
            for (j = i - 1; j >= 1 && v[j] > x; j--)
                v[j + 1] = v[j]
            v[j + 1] = x
        }
        med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
        print med, v[1], v[n]
    }' "$tmp/results"
}
# ho_val NAME KEY [FORMAT]: the median of KEY over NAME's runs, formatted.
ho_val() {
    local m
    read -r m _ <<<"$(ho_stat value "$1" - "$2")"
    num "${3:-%.0f}" "$m"
}
# ho_total "NAME..." KEY: the sum of KEY over the runs of the NAMEs (counts:
# errors, overlaps, lost messages, timeouts), n/a when no run has it.
ho_total() {
    awk -v names="$1" -v k="$2" 'BEGIN { split(names, l, " "); for (i in l) want[l[i]] = 1 }
    $1 in want {
        for (i = 3; i <= NF; i++)
            if (substr($i, 1, length(k) + 1) == k "=" && substr($i, length(k) + 2) ~ /^[0-9]+$/) {
                t += substr($i, length(k) + 2); f = 1 }
    } END { if (f) printf "%d", t; else printf "n/a" }' "$tmp/results"
}
# ho_self_cpu A: the raw client's own CPU per handoff, us (its CPU percent
# of one core over its handoffs per second).
ho_self_cpu() {
    ho_val "$1" self_cpu_pct %.1f | awk -v o="$(ho_val "$1" ops_per_sec)" '{
        if ($1 ~ /^[0-9.]+$/ && o > 0) printf "%.0f", $1 * 1e4 / o; else printf "n/a" }'
}
# ho_sum NAME K1 K2: the sum of two keys' medians (n/a when either is).
ho_sum() {
    awk -v a="$(ho_val "$1" "$2" %.1f)" -v b="$(ho_val "$1" "$3" %.1f)" 'BEGIN {
        if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/)
            printf "%.0f", a + b; else printf "n/a" }'
}
ho_p50() { ho_val "$1" "$2_p50_us" %.0f; }
if section handoff; then
{
    echo
    echo "Lock handoff (issue 4): Redisson-style waiters on ONE hash lock"
    echo "  (acquire script; on a PTTL reply wait for the unlock script's message"
    echo "  on redisson_lock__channel:{name}, ${HO_HOLD_US} us hold, 2 s safety timeout),"
    echo "  next to the raw ZooKeeper recipe (8 waiters, one session each:"
    echo "  sequential ephemeral nodes, getData watch on the predecessor)."
    echo "  wake: from the unlock's reply (raw: the delete's completion) to each"
    echo "  other waiter's message (raw: the successor's watch event), negative"
    echo "  when the wake-up came first; other side: waiters on the other sidecar"
    echo "  (raw: every waiter is another session); from request: from the"
    echo "  moment the unlock (delete) was sent; lock free: from the unlock's reply"
    echo "  to the next acquire's reply (us).  $HO_ROUNDS round(s) of raw and"
    echo "  zkresp 4+4 (medians), one of the others.  CPU time outside the"
    echo "  measured processes during these runs: ${ho_others}% of the machine (the"
    echo "  p99s are sensitive to it: a waiter or sidecar not scheduled is late)."
    printf '  %-26s %9s %14s %14s %14s %12s %8s %5s %9s\n' "" "handoffs/s" \
        "wake p50/p99" "other side" "from request" "lock free" timeouts lost \
        "CPU us/ho"
    for row in "ho-zk44|zkresp, 2 sidecars (4+4)" "ho-zk8|zkresp, 1 sidecar (8)" \
        "ho-redis|redis-server (8)" "ho-raw|raw ZooKeeper recipe (8)"; do
        n=${row%%|*}
        case $n in
        ho-redis) cpu=$(ho_val "$n" redis_cpu_us_per_op) ;;
        ho-raw) cpu=$(ho_self_cpu "$n") ;;
        *) cpu=$(ho_sum "$n" zkresp_cpu_us_per_op zkresp2_cpu_us_per_op) ;;
        esac
        printf '  %-26s %9s %14s %14s %14s %12s %8s %5s %9s\n' "${row#*|}" \
            "$(ho_val "$n" ops_per_sec)" \
            "$(ho_p50 "$n" wake)/$(ho_val "$n" wake_p99_us)" \
            "$(ho_p50 "$n" xwake)/$(ho_val "$n" xwake_p99_us)" \
            "$(ho_p50 "$n" sent_wake)/$(ho_val "$n" sent_wake_p99_us)" \
            "$(ho_p50 "$n" gap)/$(ho_val "$n" gap_p99_us)" \
            "$(ho_total "$n" timeouts)" "$(ho_total "$n" lost)" "$cpu"
    done
    echo "  timeouts, lost, and the counts below: totals over the rounds."
    echo "  CPU us/ho: the server side's CPU per handoff (zkresp: both sidecars;"
    echo "  raw: the 8 clients); ZooKeeper's is in the result lines (zk_cpu_us_per_op)."
    echo "  Early wake-ups (before the release's reply was read): zkresp 4+4" \
        "$(ho_val ho-zk44 early) of $(ho_val ho-zk44 wake_n), raw" \
        "$(ho_val ho-raw early) of $(ho_val ho-raw wake_n) (medians)."
    echo "  Messages: zkresp 4+4 $(ho_total ho-zk44 messages) received of" \
        "$(ho_total ho-zk44 expected) published x subscribers (all rounds), made up by the" \
        "sidecars: $(ho_total ho-zk44 sidecar_made_up) (4+4)," \
        "$(ho_total ho-zk8 sidecar_made_up) (8)."
    echo "  Errors (unexpected replies, retried; of which TRYAGAIN): zkresp" \
        "$(ho_total ho-zk44 errors) ($(ho_total ho-zk44 tryagain)) 4+4," \
        "$(ho_total ho-zk8 errors) ($(ho_total ho-zk8 tryagain)) 8," \
        "$(ho_total ho-zk22 errors) ($(ho_total ho-zk22 tryagain)) 2+2," \
        "$(ho_total ho-zk26 errors) ($(ho_total ho-zk26 tryagain)) 2+6;" \
        "redis-server $(ho_total ho-redis errors); raw $(ho_total ho-raw errors)."
    echo "  ZooKeeper requests per handoff (mntr zk_packets_received): zkresp" \
        "$(ho_val ho-zk44 zk_reqs_per_handoff %.1f) (4+4), $(ho_val ho-zk8 zk_reqs_per_handoff %.1f) (8);" \
        "raw $(ho_val ho-raw zk_reqs_per_handoff %.1f)."
    echo "  Overlaps (an acquire answered nil while another waiter held): zkresp" \
        "$(ho_total ho-zk44 overlaps) (4+4), $(ho_total ho-zk8 overlaps) (8)," \
        "$(ho_total ho-zk22 overlaps) (2+2), $(ho_total ho-zk26 overlaps) (2+6);" \
        "redis-server $(ho_total ho-redis overlaps); raw $(ho_total ho-raw overlaps)."
    echo
    echo "  Watch events per unlock (ZooKeeper's mntr: watchers triggered, all"
    echo "  event types, over the measured period / unlocks in it)"
    printf '  %-26s %12s %14s %16s %13s\n' waiters "ZK events" "of which deleted" \
        "sidecar-counted" "ZK watches"
    for row in "ho-zk22|zkresp 2+2" "ho-zk44|zkresp 4+4" "ho-zk26|zkresp 2+6" \
        "ho-zk8|zkresp 8 on one sidecar" "ho-raw|raw recipe, 8"; do
        n=${row%%|*}
        printf '  %-26s %12s %14s %16s %13s\n' "${row#*|}" \
            "$(ho_val "$n" zk_watch_events_per_release %.2f)" \
            "$(ho_val "$n" zk_wev_deleted %.2f)" \
            "$(ho_val "$n" sidecar_watch_per_release %.2f)" \
            "$(ho_val "$n" zk_watch_count)"
    done
    echo "  (sidecar-counted: both sidecars' /metrics *watch*_total per unlock over"
    echo "  the whole run, n/a when not exported; ZK watches: zk_watch_count at the"
    echo "  end of the measured period)"
    echo
    echo "Targets (handoff)"
    # From the reply, the raw recipe's p50 is about 0 (or below): then
    # "within 2x" means no later than the reply.
    hz=$(ho_val ho-zk44 wake_p50_us %.1f)
    hr=$(ho_val ho-raw wake_p50_us %.1f)
    printf '  %-50s %9s   %s\n' "wake p50 zkresp 4+4 vs raw, from the reply, within 2x" \
        "$hz vs $hr us" "$(reply_target "$hz" "$hr" "later than the reply")"
    read -r sq slo shi <<<"$(ho_stat ratio ho-zk44 ho-raw sent_wake_p50_us)"
    printf '  %-50s %9s   %-8s (range %s..%s)\n' \
        "wake p50 zkresp 4+4/raw, from the request, within 2x" "$(num %.2f "$sq")" \
        "$(met "$sq" "<" 2.0001)" "$(num %.2f "$slo")" "$(num %.2f "$shi")"
    printf '  %-50s %9s   %s\n' "ZK watch events per unlock, 2+2 -> 4+4 -> 2+6" \
        "$(ho_val ho-zk22 zk_watch_events_per_release %.2f) -> $(ho_val ho-zk44 zk_watch_events_per_release %.2f) -> $(ho_val ho-zk26 zk_watch_events_per_release %.2f)" \
        "$(awk -v a="$(ho_val ho-zk22 zk_watch_events_per_release %.2f)" \
            -v c="$(ho_val ho-zk26 zk_watch_events_per_release %.2f)" 'BEGIN {
            if (a !~ /^[0-9.]+$/ || c !~ /^[0-9.]+$/) print "NOT MET (n/a)"
            else if (c <= a * 1.25 + 0.1) print "met (does not grow with waiters)"
            else print "NOT MET (grows with waiters)" }')"
    echo "  (raw p50 from the reply is near 0: ZooKeeper sends the event and the"
    echo "  delete's reply together; the request-based ratio compares release +"
    echo "  notification end to end)"
    echo
    echo "Result lines (handoff):"
    grep '^ho-' "$tmp/results" | sed 's/^/  /'
} | tee -a "$out/report.txt"
fi # section handoff
# ============================================================ end handoff
# ================================================================ native
# Native locks (issue 18), appended to the report: LOCK.ACQUIRE / LOCK.RELEASE
# (tests/bench/handoff.c --native): 8 waiters on ONE key, 4 on each sidecar,
# one blocking connection each (LOCK.ACQUIRE k owner PX 30000 WAIT ms, hold,
# LOCK.RELEASE k owner), next to the raw ZooKeeper lock recipe with 8 waiters
# over 2 sessions (the two sidecars are two sessions); then, for comparison,
# 8 waiters on one sidecar next to the recipe's 8 on one session (no handoff
# needs the other sidecar's read).  The four runs go back to back in each of
# BENCH_NATIVE_ROUNDS rounds (default
# BENCH_HANDOFF_ROUNDS), with the handoff section's duration, warm-up and
# hold.  A report: the issue's targets (native/raw handoffs/s >= 0.8, wake
# p50 within 2x raw) are marked met / not met and fail nothing; a grant that
# overlapped another hold, or whose fencing token was not above the previous
# grant's, makes the bench exit non-zero after the report.
# Before the first round, native 4+4 and then the raw recipe run unmeasured
# for BENCH_NATIVE_JIT_WARMUP seconds between them (default 20): the JVM
# warm-up above runs create/delete pairs only, and ZooKeeper's JIT
# compiles the paths these runs add (multi, data watches, getChildren2)
# during their first tens of seconds, up to half a CPU of this machine
# taken from the first native round alone.  The report gives the JIT's
# share of a CPU during the measured runs.
# Environment: BENCH_NATIVE_ROUNDS, BENCH_NATIVE_WAIT_MS (LOCK.ACQUIRE's
# WAIT, default 2000), BENCH_NATIVE_JIT_WARMUP.
native_broken=0
# zk_jit_ticks: CPU clock ticks of ZooKeeper's JIT compiler threads so far
# (n/a where the threads cannot be read).
zk_jit_ticks() {
    local t n=0 found=0
    for t in /proc/"$zk_pid"/task/*; do
        case "$(cat "$t/comm" 2>/dev/null)" in
        C1\ Compiler* | C2\ Compiler*)
            found=1
            n=$((n + $(stat_ticks "$t/stat")))
            ;;
        esac
    done
    if [ "$found" = 1 ]; then echo "$n"; else echo n/a; fi
}
if section native; then
NAT_ROUNDS=${BENCH_NATIVE_ROUNDS:-$HO_ROUNDS}
NAT_WAIT_MS=${BENCH_NATIVE_WAIT_MS:-2000}
NAT_JIT_WARMUP=${BENCH_NATIVE_JIT_WARMUP:-20}
if [ "$NAT_JIT_WARMUP" != 0 ]; then
    nat_jw=$(awk -v w="$NAT_JIT_WARMUP" 'BEGIN { printf "%.1f", w * 3 / 4 }')
    "$out/handoff" --native --side "$zkresp_port:4" --side "$zkresp2_port:4" \
        --key bench:native:jit --seconds "$nat_jw" --warmup 0 \
        --timeout-ms "$NAT_WAIT_MS" >/dev/null 2>&1 || true
    nat_jw=$(awk -v w="$NAT_JIT_WARMUP" 'BEGIN { printf "%.1f", w / 4 }')
    "$out/handoff" --zk "127.0.0.1:$zk_port" --waiters 8 --sessions 2 \
        --root /bench/native-jit --seconds "$nat_jw" --warmup 0 \
        --resolve-delay "$RAW_RESOLVE_DELAY" >/dev/null 2>&1 || true
fi
nat_jit0=$(zk_jit_ticks)
read -r nat_busy0 nat_ours0 <<<"$(ho_ticks)"
nat_t0=$(date +%s.%N)
measure_ok_rc=3
for ((r = 1; r <= NAT_ROUNDS; r++)); do
    ho_measure nat-raw "$r" --zk "127.0.0.1:$zk_port" --waiters 8 \
        --sessions 2 --root /bench/native-raw \
        --resolve-delay "$RAW_RESOLVE_DELAY" "${ho_zk[@]}"
    ho_measure nat-44 "$r" --native --side "$zkresp_port:4" \
        --side "$zkresp2_port:4" --key "bench:native:44:$r" \
        --timeout-ms "$NAT_WAIT_MS" "${ho_zk[@]}" "${ho_sides[@]}"
    ho_measure nat-raw1 "$r" --zk "127.0.0.1:$zk_port" --waiters 8 \
        --sessions 1 --root /bench/native-raw1 \
        --resolve-delay "$RAW_RESOLVE_DELAY" "${ho_zk[@]}"
    ho_measure nat-8 "$r" --native --side "$zkresp_port:8" \
        --key "bench:native:8:$r" \
        --timeout-ms "$NAT_WAIT_MS" "${ho_zk[@]}" "${ho_sides[@]}"
done
measure_ok_rc=
read -r nat_busy1 nat_ours1 <<<"$(ho_ticks)"
nat_jit1=$(zk_jit_ticks)
nat_jit=$(awk -v a="$nat_jit0" -v b="$nat_jit1" -v t0="$nat_t0" -v t1="$(date +%s.%N)" \
    -v hz="$(getconf CLK_TCK)" 'BEGIN { if (a == "n/a" || b == "n/a") print "n/a"
        else printf "%.0f%%\n", (b - a) / hz / (t1 - t0) * 100 }')
nat_others=$(awk -v b=$((nat_busy1 - nat_busy0)) -v o=$((nat_ours1 - nat_ours0)) \
    -v t0="$nat_t0" -v t1="$(date +%s.%N)" -v hz="$(getconf CLK_TCK)" -v n="$(nproc)" \
    'BEGIN { x = (b - o) / hz / (t1 - t0) / n * 100; printf "%.0f", x < 0 ? 0 : x }')
nat_overlaps=$(ho_total "nat-44 nat-8" overlaps)
nat_fencing=$(ho_total "nat-44 nat-8" fencing)
if [ "$nat_overlaps" != 0 ] || [ "$nat_fencing" != 0 ]; then
    native_broken=1
fi
{
    echo
    echo "Native locks (issue 18): LOCK.ACQUIRE k owner PX 30000 WAIT $NAT_WAIT_MS,"
    echo "  hold ${HO_HOLD_US} us, LOCK.RELEASE k owner; 8 waiters on ONE key, 4 on each"
    echo "  of 2 sidecars, one blocking connection each; next to the raw ZooKeeper"
    echo "  recipe with 8 waiters over 2 sessions.  wake: native from LOCK.RELEASE's"
    echo "  reply to the next holder's LOCK.ACQUIRE reply (it holds); raw from the"
    echo "  delete's completion to the successor's watch event (it still lists the"
    echo "  children before it holds); other side: the next holder on the other"
    echo "  sidecar (raw: session); from request: from the moment the release was"
    echo "  sent; lock free: from the release's reply to the next holder's grant"
    echo "  (both modes: it holds).  $NAT_ROUNDS round(s), medians.  CPU time outside"
    echo "  the measured processes during these runs: ${nat_others}% of the machine."
    echo "  ZooKeeper's JIT compiler during them: ${nat_jit} of a CPU (after a"
    echo "  ${NAT_JIT_WARMUP} s unmeasured warm-up of these runs' own requests)."
    printf '  %-32s %9s %14s %14s %14s %12s %8s %9s %8s\n' "" "handoffs/s" \
        "wake p50/p99" "other side" "from request" "lock free" timeouts \
        "CPU us/ho" "ZK/ho"
    for row in "nat-44|native LOCK.*, 2 sidecars (4+4)" \
        "nat-raw|raw recipe, 2 sessions (8)" \
        "nat-8|native LOCK.*, 1 sidecar (8)" \
        "nat-raw1|raw recipe, 1 session (8)"; do
        n=${row%%|*}
        case $n in
        nat-raw*) cpu=$(ho_self_cpu "$n") ;;
        *) cpu=$(ho_sum "$n" zkresp_cpu_us_per_op zkresp2_cpu_us_per_op) ;;
        esac
        printf '  %-32s %9s %14s %14s %14s %12s %8s %9s %8s\n' "${row#*|}" \
            "$(ho_val "$n" ops_per_sec)" \
            "$(ho_p50 "$n" wake)/$(ho_val "$n" wake_p99_us)" \
            "$(ho_p50 "$n" xwake)/$(ho_val "$n" xwake_p99_us)" \
            "$(ho_p50 "$n" sent_wake)/$(ho_val "$n" sent_wake_p99_us)" \
            "$(ho_p50 "$n" gap)/$(ho_val "$n" gap_p99_us)" \
            "$(ho_total "$n" timeouts)" "$cpu" \
            "$(ho_val "$n" zk_reqs_per_handoff %.1f)"
    done
    echo "  CPU us/ho: native both sidecars', raw the 8 clients'; ZooKeeper's:" \
        "$(ho_val nat-44 zk_cpu_us_per_op %.1f) (native), $(ho_val nat-raw zk_cpu_us_per_op %.1f) (raw)."
    echo "  Same side (the next holder on the releaser's sidecar; raw: session): wake" \
        "p50/p99 $(ho_p50 nat-44 swake)/$(ho_val nat-44 swake_p99_us) us (native)," \
        "$(ho_p50 nat-raw swake)/$(ho_val nat-raw swake_p99_us) us (raw)."
    echo "  ZK/ho: ZooKeeper requests per handoff (mntr zk_packets_received);" \
        "watch events per release: $(ho_val nat-44 zk_watch_events_per_release %.2f)" \
        "(native), $(ho_val nat-raw zk_watch_events_per_release %.2f) (raw)."
    echo "  Sent by the sidecars per release, by operation (round 1, whole run):" \
        "$(awk '$1 == "nat-44" && $2 == 1 { for (i = 3; i <= NF; i++) if ($i ~ /^sidecar_zk_per_release=/) {
                 v = $i; sub(/^[^=]*=/, "", v); gsub(/,/, ", ", v); gsub(/:/, " ", v); print v } }' "$tmp/results")"
    echo "  (ahead: table reads sent by the ZooKeeper client's thread as a watch event came)."
    echo "  Their round trips, mean from sending to the answer on the ZooKeeper client's thread," \
        "and (wait) from there to the loop thread, answers and events (round 1, whole run, us):" \
        "$(awk '$1 == "nat-44" && $2 == 1 { for (i = 3; i <= NF; i++) if ($i ~ /^sidecar_zk_mean_us=/) {
                 v = $i; sub(/^[^=]*=/, "", v); gsub(/,/, ", ", v); gsub(/:/, " ", v); print v } }' "$tmp/results")."
    echo "  By round, native 4+4 against the recipe, and the share of native handoffs whose next"
    echo "  holder was on the other sidecar: $(awk '
        function val(k, i, n) { for (i = 3; i <= NF; i++) { n = index($i, "=")
            if (n && substr($i, 1, n - 1) == k) return substr($i, n + 1) } return "" }
        $1 == "nat-raw" { raw[$2] = val("ops_per_sec") }
        $1 == "nat-44" { nat[$2] = val("ops_per_sec"); x[$2] = val("xwake_n"); n[$2] = val("ops")
            if ($2 > rounds) rounds = $2 }
        END { for (r = 1; r <= rounds; r++) {
            out = out (r > 1 ? ", " : "") "round " r " "
            out = out ((raw[r] > 0) ? sprintf("%.2f", nat[r] / raw[r]) : "n/a")
            out = out ((n[r] > 0) ? sprintf(" (%.0f%%)", 100 * x[r] / n[r]) : "") }
            print out "." }' "$tmp/results")"
    echo "  (The holders keep the order of the waiters' first requests, a random arrangement of 4+4:"
    echo "  2, 4, 6 or 8 of 8 handoffs cross with probability 0.11, 0.51, 0.34, 0.03; tests/bench/NOTES.md.)"
    echo "  One sidecar (8 waiters on it, every handoff on one session) next to the"
    echo "  raw recipe on one session: the same queue without the other sidecar's read."
    echo "  Native grants (all rounds): $(ho_total "nat-44 nat-8" tokens) checked, fencing" \
        "violations $nat_fencing, overlaps $nat_overlaps; raw overlaps" \
        "$(ho_total "nat-raw nat-raw1" overlaps).  LOCK.RELEASE of a held lock answered 0:" \
        "$(ho_total "nat-44 nat-8" release_not_held).  Errors: native" \
        "$(ho_total "nat-44 nat-8" errors) (TRYAGAIN $(ho_total "nat-44 nat-8" tryagain)), raw" \
        "$(ho_total "nat-raw nat-raw1" errors)."
    echo "  Not timed as wake-ups (measured period, all rounds): granted right" \
        "after its own release $(ho_total nat-44 own), asked after the release" \
        "was sent $(ho_total nat-44 fresh); early (before the release's reply):" \
        "native $(ho_val nat-44 early) of $(ho_val nat-44 wake_n), raw" \
        "$(ho_val nat-raw early) of $(ho_val nat-raw wake_n) (medians)."
    echo "  Handoffs to the other sidecar, by round:" \
        "$(awk '$1 == "nat-44" { for (i = 3; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                 if (v["wake_n"] > 0) printf "%s%.0f%% (%s/s)", n++ ? ", " : "", 100 * v["xwake_n"] / v["wake_n"], v["ops_per_sec"] }' "$tmp/results")."
    echo "  (the waiters hold in the cyclic order of their first arrivals, so this"
    echo "  share, one ZooKeeper round trip more per handoff, is chance per round)"
    echo
    echo "Targets (native locks, issue 18; a report, not a test)"
    read -r nq nlo nhi <<<"$(ho_stat ratio nat-44 nat-raw ops_per_sec)"
    printf '  %-52s %9s   %-8s (range %s..%s)\n' \
        "handoffs/s native/raw >= 0.8" "$(num %.2f "$nq")" \
        "$(met "$nq" ">=" 0.8)" "$(num %.2f "$nlo")" "$(num %.2f "$nhi")"
    nz=$(ho_val nat-44 wake_p50_us %.1f)
    nr=$(ho_val nat-raw wake_p50_us %.1f)
    printf '  %-52s %9s   %s\n' "wake p50 native vs raw, from the reply, within 2x" \
        "$nz vs $nr us" "$(reply_target "$nz" "$nr" "raw is at or before the reply; native is later")"
    nz=$(ho_val nat-44 swake_p50_us %.1f)
    nr=$(ho_val nat-raw swake_p50_us %.1f)
    printf '  %-52s %9s   %s\n' "  the same, next holder on the releaser's sidecar" \
        "$nz vs $nr us" "$(reply_target "$nz" "$nr" "native is later")"
    nz=$(ho_val nat-44 xwake_p50_us %.1f)
    nr=$(ho_val nat-raw xwake_p50_us %.1f)
    printf '  %-52s %9s   %s\n' "  the same, next holder on the other sidecar" \
        "$nz vs $nr us" "$(reply_target "$nz" "$nr" "native reads its grant: one round trip")"
    nz=$(ho_val nat-44 wake_p50_us %.1f)
    nr=$(ho_val nat-raw sent_wake_p50_us %.1f)
    printf '  %-52s %9s   %s\n' "wake p50 native from the reply vs raw notification" \
        "$nz vs $nr us" "$(reply_target "$nz" "$nr" "n/a")"
    nz=$(ho_val nat-44 xwake_p50_us %.1f)
    nr=$(ho_val nat-raw xsent_wake_p50_us %.1f)
    printf '  %-52s %9s   %s\n' "  the same, next holder on the other sidecar" \
        "$nz vs $nr us" "$(reply_target "$nz" "$nr" "n/a")"
    echo "    (the notification's own latency: from the delete's request to the"
    echo "    successor's event; native still from the release's reply)"
    read -r sq slo shi <<<"$(ho_stat ratio nat-44 nat-raw sent_wake_p50_us)"
    printf '  %-52s %9s   %-8s (range %s..%s)\n' \
        "wake p50 native/raw, from the request, within 2x" "$(num %.2f "$sq")" \
        "$(met "$sq" "<" 2.0001)" "$(num %.2f "$slo")" "$(num %.2f "$shi")"
    read -r oq olo ohi <<<"$(ho_stat ratio nat-8 nat-raw1 ops_per_sec)"
    printf '  %-52s %9s   %-8s (range %s..%s)\n' \
        "handoffs/s native/raw, 1 sidecar vs 1 session" "$(num %.2f "$oq")" \
        "(info)" "$(num %.2f "$olo")" "$(num %.2f "$ohi")"
    read -r gq glo ghi <<<"$(ho_stat ratio nat-44 nat-raw gap_p50_us)"
    printf '  %-52s %9s   %-8s (range %s..%s)\n' \
        "lock free p50 native/raw (release to next holder)" "$(num %.2f "$gq")" \
        "(info)" "$(num %.2f "$glo")" "$(num %.2f "$ghi")"
    printf '  %-52s %9s   %s\n' "mutual exclusion (fencing tokens, overlaps)" \
        "$nat_fencing/$nat_overlaps" \
        "$([ "$native_broken" = 0 ] && echo "held" || echo "BROKEN: the bench fails")"
    echo "  (the raw watch event comes with the delete's reply, so its wake p50"
    echo "  from the reply is near 0; the request-based ratio compares release +"
    echo "  notification end to end, and lock free compares release to the next"
    echo "  holder holding, which for raw includes its getChildren)"
    echo
    echo "Result lines (native locks):"
    grep '^nat-' "$tmp/results" | sed 's/^/  /'
} | tee -a "$out/report.txt"
fi # section native
# ============================================================= end native
# Policy cost (issue 5): tests/bench/policy.sh on this ZooKeeper, appended.
if section policy; then
POLICY_BENCH_ZK=127.0.0.1:$zk_port BENCH_OUT=$out ZKRESP_BIN=$ZKRESP BENCH_SECONDS=$SECS BENCH_WARMUP=$WARMUP BENCH_ROUNDS=$ROUNDS tests/bench/policy.sh | tee -a "$out/report.txt"
fi # section policy
if [ "$native_broken" = 1 ]; then
    fail "native locks broke mutual exclusion: $nat_fencing fencing violations," \
        "$nat_overlaps overlapping grants (see the native section above)"
fi
