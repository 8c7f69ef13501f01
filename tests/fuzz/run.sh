#!/usr/bin/env bash
# Builds the libFuzzer harness of the request reader into build/fuzz/ and
# runs it for FUZZ_SECONDS (default 60).  New inputs go to build/fuzz/corpus
# (tests/fuzz/corpus holds the seeds and is only read); a crashing input is
# written to build/fuzz/artifacts/ and the script exits non-zero.
#
#   tests/fuzz/run.sh                  fuzz for FUZZ_SECONDS
#   tests/fuzz/run.sh FILE...          run the harness once on each FILE
#
# FUZZ_JOBS (default 1) runs that many fuzzing processes in parallel.
#
# Then the command-surface fuzzer (tests/integration/test_31_gateway_hardening.py,
# test_command_surface_random_shapes) runs for FUZZ_SECONDS too, against
# build/zkresp-asan with a real ZooKeeper; ZKRESP_FUZZ_SEED repeats a run.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

out=build/fuzz
seconds=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-1}
cc=${FUZZ_CC:-clang}
mkdir -p "$out/corpus" "$out/artifacts"

# shellcheck disable=SC2046
"$cc" -std=c11 -D_GNU_SOURCE -g -O1 -Igateway -Isidecar \
    $(pkg-config --cflags hiredis) \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -fno-omit-frame-pointer \
    tests/fuzz/proto_fuzz.c gateway/proto.c \
    -o "$out/proto_fuzz" $(pkg-config --libs hiredis)

if [ $# -gt 0 ]; then
    exec "$out/proto_fuzz" "$@"
fi

echo "fuzz: proto_fuzz for ${seconds}s (${jobs} job(s))"
args=(-max_total_time="$seconds" -timeout=10 -max_len=4096
      -dict=tests/fuzz/resp.dict -artifact_prefix="$out/artifacts/"
      -print_final_stats=1)
if [ "$jobs" -gt 1 ]; then
    args+=(-fork="$jobs")
fi
"$out/proto_fuzz" "${args[@]}" "$out/corpus" tests/fuzz/corpus

echo "fuzz: the command surface for ${seconds}s (build/zkresp-asan)"
ZKRESP_BIN=build/zkresp-asan ZKRESP_FUZZ_SECONDS="$seconds" \
    ZKRESP_TEST_TIMEOUT=$((seconds + 180)) \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider \
    tests/integration/test_31_gateway_hardening.py -k command_surface
