#!/usr/bin/env bash
# `make run`: a local ZooKeeper (unless ZKRESP_ZK names one) and zkresp on
# 127.0.0.1:6379 (ZKRESP_PORT to change), in the foreground.  Ctrl-C stops
# both.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/lib/zkserver.sh"

dir=$(mktemp -d /tmp/zkresp-run.XXXXXX)
ZRPID=
cleanup() {
    # (each step guarded: under set -e a failing last command of an && list
    # would end the trap before ZooKeeper is stopped)
    if [ -n "$ZRPID" ] && kill -TERM "$ZRPID" 2>/dev/null; then
        wait "$ZRPID" 2>/dev/null || true
    fi
    zk_stop
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "${ZKRESP_ZK:-}" ]; then
    port=$(zk_free_port)
    echo "run: starting ZooKeeper on 127.0.0.1:$port (data in $dir)"
    zk_start "$dir" "$port"
    export ZKRESP_ZK="127.0.0.1:$port"
fi
echo "run: zkresp on ${ZKRESP_BIND:-127.0.0.1}:${ZKRESP_PORT:-6379}, ZooKeeper $ZKRESP_ZK — try:" \
    "redis-cli -h ${ZKRESP_BIND:-127.0.0.1} -p ${ZKRESP_PORT:-6379} SET lock:order-42 tok-1 NX PX 30000"
"$root/build/zkresp" "$@" &
ZRPID=$!
wait "$ZRPID"
