#!/usr/bin/env bash
# Shell helpers to run a throwaway ZooKeeper server: sourced by `make run`
# and the bench.  zk_start DIR PORT starts one in DIR (config, data, logs)
# and waits for `ruok`; its PID is in $ZK_PID.  zk_stop stops it by PID.

zk_ruok() {
    local port=$1 reply
    reply=$( (exec 3<>"/dev/tcp/127.0.0.1/$port" && printf ruok >&3 && timeout 1 cat <&3) 2>/dev/null) || return 1
    [ "$reply" = imok ]
}

zk_free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

zk_start() {
    local dir=$1 port=$2
    mkdir -p "$dir/data" "$dir/logs"
    cat > "$dir/zoo.cfg" <<CFG
tickTime=500
initLimit=10
syncLimit=5
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
minSessionTimeout=1000
maxSessionTimeout=60000
admin.enableServer=false
4lw.commands.whitelist=*
CFG
    ZOO_LOG_DIR="$dir/logs" SERVER_JVMFLAGS="${SERVER_JVMFLAGS:--Xmx512m}" \
        setsid /usr/share/zookeeper/bin/zkServer.sh start-foreground "$dir/zoo.cfg" \
        > "$dir/logs/server.out" 2>&1 &
    ZK_PID=$!
    local i
    for i in $(seq 1 300); do
        zk_ruok "$port" && return 0
        kill -0 "$ZK_PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "ZooKeeper did not start; see $dir/logs/server.out" >&2
    return 1
}

zk_stop() {
    [ -n "${ZK_PID:-}" ] || return 0
    # setsid made it a process group leader: stop the group (the script and
    # its java child), which is ours alone.
    kill -TERM -- "-$ZK_PID" 2>/dev/null || kill -TERM "$ZK_PID" 2>/dev/null
    local i
    for i in $(seq 1 50); do
        kill -0 "$ZK_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL -- "-$ZK_PID" 2>/dev/null || true
    ZK_PID=
}
