#!/usr/bin/env bash
# The `make test` runner.
#
#   tests/run.sh                 every suite, in order
#   tests/run.sh integration     just one suite (several names may be given)
#
# Suites:
#   unit         build/unit (C, TAP; prints "unit: N passed, N failed")
#   spec         busted --helper=tests/spec/helper.lua -o TAP tests/spec
#   integration  /usr/bin/python3 -m pytest -q tests/integration tests/fault
#   asan         the same pytest suites against build/zkresp-asan
#                (ASan + UBSan; the harness fails a test whose zkresp printed
#                a sanitizer report).  ZKRESP_ASAN_TESTS narrows it, e.g.
#                ZKRESP_ASAN_TESTS="tests/integration".  This pass also
#                runs with ZooKeeper credentials and the creator ACL on
#                (ZKRESP_TEST_ZK_AUTH, see tests/lib/harness.py), so the whole
#                suite is run once each way; ZKRESP_ASAN_ZK_AUTH="" turns
#                that off.
#
# Each suite's output is printed as it runs.  The last line is
# "N passed, N failed" (", N skipped" when any), summed over the suites.
# Exit status is non-zero if anything failed or a suite could not run (a
# missing binary or directory counts as a failure, never as a skip).

set -u
cd "$(dirname "$0")/.."

PY=/usr/bin/python3
SUITE_TIMEOUT=${ZKRESP_SUITE_TIMEOUT:-1800}
ALL_SUITES=(unit spec integration asan)
if [ $# -gt 0 ]; then SUITES=("$@"); else SUITES=("${ALL_SUITES[@]}"); fi

TOTAL_PASS=0
TOTAL_FAIL=0
TOTAL_SKIP=0
SUMMARY=()
WORK=$(mktemp -d /tmp/zkresp-run.XXXXXX)
CHILD=""

cleanup() { rm -rf "$WORK"; }
on_signal() {
    # Stop the suite we started (by PID; the harness inside cleans up the
    # processes it started), then leave.
    if [ -n "$CHILD" ]; then kill -TERM "$CHILD" 2>/dev/null; wait "$CHILD" 2>/dev/null; fi
    cleanup
    exit 130
}
trap on_signal INT TERM
trap cleanup EXIT

# run_logged LOG CMD...: runs CMD under a time limit, output to the terminal
# and to LOG; returns its status.
run_logged() {
    local log=$1; shift
    timeout --kill-after=30 "$SUITE_TIMEOUT" "$@" > >(tee "$log") 2>&1 &
    CHILD=$!
    wait "$CHILD"
    local rc=$?
    CHILD=""
    # Let tee finish writing.
    sleep 0.2
    return $rc
}

record() {   # record NAME PASS FAIL SKIP NOTE
    local name=$1 p=$2 f=$3 s=$4 note=${5:-}
    TOTAL_PASS=$((TOTAL_PASS + p))
    TOTAL_FAIL=$((TOTAL_FAIL + f))
    TOTAL_SKIP=$((TOTAL_SKIP + s))
    local line
    line=$(printf '%-12s %d passed, %d failed' "$name" "$p" "$f")
    [ "$s" -gt 0 ] && line="$line, $s skipped"
    [ -n "$note" ] && line="$line  ($note)"
    SUMMARY+=("$line")
    echo "== $line"
}

# TAP counts from a log: sets TAP_PASS, TAP_FAIL, TAP_SKIP.
tap_counts() {
    local log=$1
    TAP_SKIP=$(grep -E -c '^ok [0-9]+.*# *(SKIP|skip)' "$log")
    TAP_PASS=$(( $(grep -E -c '^ok [0-9]+' "$log") - TAP_SKIP ))
    TAP_FAIL=$(grep -E -c '^not ok [0-9]+' "$log")
}

suite_unit() {
    echo "### unit: build/unit"
    if [ ! -x build/unit ]; then
        record unit 0 1 0 "build/unit missing: could not run"
        return
    fi
    local log=$WORK/unit.log rc
    run_logged "$log" build/unit
    rc=$?
    local p f s=0 note=""
    local line
    line=$(grep -E '^unit: [0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
    if [ -n "$line" ]; then
        p=$(echo "$line" | sed -E 's/^unit: ([0-9]+) passed.*/\1/')
        f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    else
        tap_counts "$log"
        p=$TAP_PASS f=$TAP_FAIL s=$TAP_SKIP
        note="no summary line"
    fi
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
        note="exit status $rc"
    fi
    record unit "$p" "$f" "$s" "$note"
}

suite_spec() {
    echo "### spec: busted"
    if [ ! -d tests/spec ] || [ ! -f tests/spec/helper.lua ]; then
        record spec 0 1 0 "tests/spec or its helper.lua missing: could not run"
        return
    fi
    if ! command -v busted >/dev/null; then
        record spec 0 1 0 "busted not installed: could not run"
        return
    fi
    local log=$WORK/spec.log rc note=""
    run_logged "$log" busted --helper=tests/spec/helper.lua -o TAP tests/spec
    rc=$?
    tap_counts "$log"
    local f=$TAP_FAIL
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
        note="exit status $rc"
    fi
    if [ $((TAP_PASS + f)) -eq 0 ]; then
        f=1
        note="no test ran"
    fi
    record spec "$TAP_PASS" "$f" "$TAP_SKIP" "$note"
}

# pytest_suite NAME [ENV=VALUE...] -- PYTEST ARGS...
pytest_suite() {
    local name=$1; shift
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    local log=$WORK/$name.log xml=$WORK/$name.xml rc note=""
    rm -f "$xml"
    run_logged "$log" env "${envs[@]}" "$PY" -m pytest -q -p no:cacheprovider --junitxml="$xml" "$@"
    rc=$?
    if [ ! -s "$xml" ]; then
        record "$name" 0 1 0 "pytest exited $rc without results: could not run"
        return
    fi
    local counts
    counts=$("$PY" - "$xml" <<'EOF'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
t = f = e = s = 0
for su in suites:
    t += int(su.get("tests", 0)); f += int(su.get("failures", 0))
    e += int(su.get("errors", 0)); s += int(su.get("skipped", 0))
print(t - f - e - s, f + e, s)
EOF
)
    local p f s
    read -r p f s <<<"$counts"
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
        note="pytest exit status $rc"
    fi
    if [ $((p + f)) -eq 0 ]; then
        f=1
        note="no test ran"
    fi
    record "$name" "$p" "$f" "$s" "$note"
}

suite_integration() {
    echo "### integration + fault: pytest against build/zkresp"
    if [ ! -x build/zkresp ]; then
        record integration 0 1 0 "build/zkresp missing: could not run"
        return
    fi
    pytest_suite integration ZKRESP_BIN=build/zkresp -- tests/integration tests/fault
}

suite_asan() {
    echo "### asan: pytest against build/zkresp-asan (ASan + UBSan), ZooKeeper credentials on"
    if [ ! -x build/zkresp-asan ]; then
        record asan 0 1 0 "build/zkresp-asan missing: could not run"
        return
    fi
    # shellcheck disable=SC2206
    local targets=(${ZKRESP_ASAN_TESTS:-tests/integration tests/fault})
    pytest_suite asan ZKRESP_BIN=build/zkresp-asan \
        ZKRESP_TEST_ZK_AUTH="${ZKRESP_ASAN_ZK_AUTH-zkresp:asan-pass}" \
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
        LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0" \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 -- "${targets[@]}"
}

for s in "${SUITES[@]}"; do
    case "$s" in
        unit|spec|integration|asan) "suite_$s" ;;
        *) echo "run.sh: unknown suite '$s' (known: ${ALL_SUITES[*]})" >&2
           record "$s" 0 1 0 "unknown suite" ;;
    esac
done

echo
echo "== summary"
for l in "${SUMMARY[@]}"; do echo "   $l"; done
final="$TOTAL_PASS passed, $TOTAL_FAIL failed"
[ "$TOTAL_SKIP" -gt 0 ] && final="$final, $TOTAL_SKIP skipped"
echo "$final"
[ "$TOTAL_FAIL" -eq 0 ]
