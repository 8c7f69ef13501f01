#!/usr/bin/env bash
# tests/bench/policy.sh — what a policy costs (issue 5), a section of the
# make bench report.  tests/bench/run.sh runs it after its own measurements,
# on its ZooKeeper, and appends what it prints to build/bench/report.txt.
#
# Three zkresp processes, each on its own --root:
#   none      --policy with `return {}`: no hook is guarded, the built-in
#             defaults run (the baseline)
#   default   scripts/policy.lua, the default policy
#   tenants   scripts/examples/tenants.lua, the namespace example, with every
#             connection named tenant:bench (respbench --client-name), so
#             each key goes through its key_path to <root>/t/bench/...
# measured with respbench's lock pair (SET k tok NX PX 30000 + DELIFEQ k tok)
# at C=1 in BENCH_ROUNDS rounds (the three back to back in each round) and at
# C=64 once, with zkresp's CPU time per pair.
#
# The policy's cost per command is the time zkresp spent inside its guarded
# hooks per command (INFO's # Policy section: policy_hook_time_us over
# total_commands_processed), printed next to the time of one pair at C=1
# (1e6 / pairs per second) with the target: under 5% of it.  As a
# cross-check, (CPU per pair with the policy - CPU per pair with none) / 2,
# the median over rounds.
#
# Environment: POLICY_BENCH_ZK (host:port of a running ZooKeeper; required),
# ZKRESP_BIN, BENCH_SECONDS, BENCH_WARMUP, BENCH_ROUNDS (as run.sh), and
# BENCH_OUT (default build/bench, where respbench is built).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

ZK=${POLICY_BENCH_ZK:?POLICY_BENCH_ZK (host:port of a ZooKeeper) is required}
ZKRESP=${ZKRESP_BIN:-$root/build/zkresp}
OUT=${BENCH_OUT:-$root/build/bench}
SECS=${BENCH_SECONDS:-5}
WARMUP=${BENCH_WARMUP:-1}
ROUNDS=${BENCH_ROUNDS:-3}
RESPBENCH=$OUT/respbench

log() { printf 'bench: %s\n' "$*" >&2; }
fail() {
    printf 'bench: FAILED: %s\n' "$*" >&2
    exit 1
}
[ -x "$RESPBENCH" ] || fail "$RESPBENCH not built (run make bench)"
[ -x "$ZKRESP" ] || fail "$ZKRESP not built"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/zkresp-policy-bench.XXXXXX")
pids=()
cleanup() {
    local rc=$? pid i
    trap - EXIT INT TERM
    for pid in "${pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        for i in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if [ "$rc" -ne 0 ]; then log "policy bench logs kept in $tmp"; else rm -rf "$tmp"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

echo 'return {}' >"$tmp/none.lua"
declare -A port pid
names=(none default tenants)
for n in "${names[@]}"; do
    port[$n]=$(free_port)
    args=(--port "${port[$n]}" --zk "$ZK" --root "/bench-policy-$n" --log-level warn)
    case $n in
    none) args+=(--policy "$tmp/none.lua") ;;
    tenants) args+=(--policy "$root/scripts/examples/tenants.lua") ;;
    esac
    "$ZKRESP" "${args[@]}" >"$tmp/zkresp-$n.log" 2>&1 </dev/null &
    pid[$n]=$!
    pids+=("${pid[$n]}")
done
for n in "${names[@]}"; do
    for i in $(seq 300); do
        if redis-cli -p "${port[$n]}" INFO zookeeper 2>/dev/null |
            tr -d '\r' | grep -qx 'zk_state:connected'; then
            break
        fi
        kill -0 "${pid[$n]}" 2>/dev/null || fail "zkresp ($n policy) exited: $(tail -3 "$tmp/zkresp-$n.log")"
        [ "$i" -lt 300 ] || fail "zkresp ($n policy) not connected after 30 s"
        sleep 0.1
    done
done

: >"$tmp/results"
run() { # run NAME ROUND CONNS
    local n=$1 r=$2 c=$3 extra=()
    [ "$n" = tenants ] && extra=(--client-name tenant:bench)
    log "policy $n C=$c (round $r)"
    "$RESPBENCH" --port "${port[$n]}" --mode pair --conns "$c" --seconds "$SECS" \
        --warmup "$WARMUP" --prefix "bench:policy:" --pid zkresp="${pid[$n]}" \
        "${extra[@]}" >"$tmp/out" 2>"$tmp/err" || fail "respbench ($n, C=$c): $(cat "$tmp/err")"
    kill -0 "${pid[$n]}" 2>/dev/null || fail "zkresp ($n policy) died"
    printf '%s-c%s %s %s\n' "$n" "$c" "$r" "$(cat "$tmp/out")" >>"$tmp/results"
}
for ((r = 1; r <= ROUNDS; r++)); do
    for n in "${names[@]}"; do run "$n" "$r" 1; done
done
for n in "${names[@]}"; do run "$n" 1 64; done

# The tenants run really used the namespace: its keys went to /t/bench.
if ! redis-cli -p "${port[tenants]}" INFO policy | tr -d '\r' | grep -q '^policy_hooks:.*key_path'; then
    fail "the tenants policy is not loaded"
fi

# val NAME KEY: the median of KEY over NAME's rounds.
val() {
    awk -v a="$1" -v k="$2" '
    $1 == a { for (i = 3; i <= NF; i++) { n = index($i, "="); if (n && substr($i, 1, n - 1) == k) v[++c] = substr($i, n + 1) + 0 } }
    END {
        if (!c) { print "n/a"; exit }
        for (i = 2; i <= c; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; j--) v[j + 1] = v[j]; v[j + 1] = x }
        print (c % 2) ? v[(c + 1) / 2] : (v[c / 2] + v[c / 2 + 1]) / 2
    }' "$tmp/results"
}
# The policy's median per-round CPU difference to none, per command (µs).
cost() {
    awk -v p="$1-c1" -v b="none-c1" '
    function get(k, i, n) { for (i = 3; i <= NF; i++) { n = index($i, "="); if (n && substr($i, 1, n - 1) == k) return substr($i, n + 1) + 0 } return -1 }
    $1 == p { P[$2] = get("zkresp_cpu_us_per_op") }
    $1 == b { B[$2] = get("zkresp_cpu_us_per_op") }
    END {
        for (r in P) if ((r in B) && P[r] >= 0 && B[r] >= 0) v[++c] = (P[r] - B[r]) / 2
        if (!c) { print "n/a"; exit }
        for (i = 2; i <= c; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; j--) v[j + 1] = v[j]; v[j + 1] = x }
        print (c % 2) ? v[(c + 1) / 2] : (v[c / 2] + v[c / 2 + 1]) / 2
    }' "$tmp/results"
}
# In-process: hook microseconds and calls per command from INFO.
inproc() {
    local info
    info=$(redis-cli -p "${port[$1]}" INFO | tr -d '\r')
    awk -F: '
        $1 == "total_commands_processed" { c = $2 }
        $1 == "policy_hook_time_us" { t = $2 }
        $1 == "policy_hook_calls" { n = $2 }
        END { if (c > 0) printf "%.2f %.1f\n", t / c, n / c; else print "n/a n/a" }' <<<"$info"
}

echo
echo "Policy cost (issue 5): SET NX PX 30000 + DELIFEQ, zkresp with no hooks"
echo "(policy 'return {}'), the default policy, and the namespace example"
echo "(scripts/examples/tenants.lua, connections named tenant:bench); C=1 medians"
echo "over $ROUNDS rounds, C=64 one run; ${SECS} s each"
printf '  %-9s %12s %9s %14s %13s %14s %13s %12s\n' policy "pairs/s C=1" "p50 us" \
    "CPU us/pair" "pairs/s C=64" "CPU us/pair64" "hook us/cmd" "hooks/cmd"
for n in "${names[@]}"; do
    read -r hus hcalls <<<"$(inproc "$n")"
    printf '  %-9s %12.0f %9.1f %14.1f %13.0f %14.1f %13s %12s\n' "$n" \
        "$(val "$n-c1" ops_per_sec)" "$(val "$n-c1" p50_us)" \
        "$(val "$n-c1" zkresp_cpu_us_per_op)" "$(val "$n-c64" ops_per_sec)" \
        "$(val "$n-c64" zkresp_cpu_us_per_op)" "$hus" "$hcalls"
done
echo
echo "Targets (policy)"
for n in default tenants; do
    c=$(cost "$n")
    read -r hus _ <<<"$(inproc "$n")"
    pair_us=$(awk -v r="$(val "$n-c1" ops_per_sec)" 'BEGIN { if (r > 0) printf "%.1f", 1e6 / r; else print "n/a" }')
    pct=$(awk -v c="$hus" -v p="$pair_us" 'BEGIN { if (c ~ /^-?[0-9.]+$/ && p > 0) printf "%.2f", 100 * c / p; else print "n/a" }')
    abpct=$(awk -v c="$c" -v p="$pair_us" 'BEGIN { if (c ~ /^-?[0-9.]+$/ && p > 0) printf "%.2f", 100 * c / p; else print "n/a" }')
    verdict=$(awk -v v="$pct" 'BEGIN { if (v !~ /^-?[0-9.]+$/) print "NOT MET (n/a)"; else if (v < 5) print "met"; else print "NOT MET" }')
    printf '  %-46s %s us = %s%% of a %s us pair   %s\n' \
        "policy cost per command ($n), < 5% of a pair" "$hus" "$pct" "$pair_us" "$verdict"
    printf '  %-46s %s us = %s%%\n' "  cross-check: CPU/pair vs none, / 2" \
        "$(awk -v c="$c" 'BEGIN { if (c ~ /^-?[0-9.]+$/) printf "%.2f", c; else print c }')" "$abpct"
done
echo "  (cost per command: the time zkresp spent inside the policy's guarded hooks"
echo "  per command, INFO policy_hook_time_us / total_commands_processed, over a"
echo "  pair's time at C=1 (1e6 / pairs per second).  The cross-check is the median"
echo "  per-round difference of zkresp's CPU per pair to the no-hooks run, halved:"
echo "  it includes everything the policy adds, and the noise of two runs, which on"
echo "  a shared machine is larger than the policy (it may come out negative).)"
echo
echo "Result lines (policy):"
sed 's/^/  /' "$tmp/results"
