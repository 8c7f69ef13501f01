"""A 3-node ZooKeeper ensemble on loopback, and per-sidecar proxy sets.

ZkEnsemble: N (3) ZooKeeper 3.8 servers, each started as Debian's
`zkServer.sh start-foreground <cfg>` in its own temp dir with its own
dataDir, `myid`, free client/peer/election ports and a small tickTime, so
that the ensemble's timings are short:

    tickTime 200 ms, initLimit 10 (2 s), syncLimit 5 (1 s: a follower that
    hears nothing from its leader for 1 s gives it up), minSessionTimeout
    400, forceSync=no, a 128 MB heap per JVM.

clock_offsets (seconds, one per server): that server's wall clock moved
by libfaketime (its monotonic clock, which sessions run on, left true), so
that a leader change moves the clock that stamps mtimes (test_49).

Every server is a harness.Proc (own process group, killed by PID on every
exit path).  Faults: kill9(i) / start_server(i), sigstop(i) / sigcont(i),
pause_all() / resume_all() (SIGSTOP/SIGCONT every server), stop_all() /
start_all() (kill -9 every server: the whole ensemble down, then back with
its data).  wait_quorum() waits until every server that is up serves and
exactly one says `Mode: leader`.

ProxySet: one harness ZkProxy per server, for one sidecar.  Its connect
string lists the three proxies, so the sidecar attaches to any server but
every byte it exchanges with the ensemble crosses its own proxies: one
sidecar alone can be slowed (delay) or partitioned (blackhole).
server_of(addr) maps the `zk_server` of its INFO (a proxy address) to the
server index.

txn_entries(): the committed transactions (parsed from the servers'
transaction logs) for the checker's evidence, see txnlog.py.
"""

import os
import signal
import time

import harness
from harness import Proc, Fatal, wait_for, free_port, new_dir, ZK_SERVER_SH, four_letter
from zkproxy import ZkProxy


class ZkEnsemble:
    def __init__(self, n=3, tick=200, init_limit=10, sync_limit=5, min_session=400,
                 max_session=60000, heap="128m", clock_offsets=None):
        self.n = n
        self.tick = tick
        self.sync_limit = sync_limit
        self.init_limit = init_limit
        self.client_ports = [free_port() for _ in range(n)]
        self.peer_ports = [free_port() for _ in range(n)]
        self.election_ports = [free_port() for _ in range(n)]
        self.dirs = [new_dir("zkens%d" % (i + 1)) for i in range(n)]
        self.procs = []
        self.stopped = set()      # indices SIGSTOPped by us
        servers = ["server.%d=127.0.0.1:%d:%d" % (i + 1, self.peer_ports[i], self.election_ports[i])
                   for i in range(n)]
        for i in range(n):
            d = self.dirs[i]
            data = os.path.join(d, "data")
            os.makedirs(data, exist_ok=True)
            with open(os.path.join(data, "myid"), "w") as f:
                f.write("%d\n" % (i + 1))
            cfg = os.path.join(d, "zoo.cfg")
            with open(cfg, "w") as f:
                f.write("\n".join([
                    "tickTime=%d" % tick,
                    "initLimit=%d" % init_limit,
                    "syncLimit=%d" % sync_limit,
                    "dataDir=%s" % data,
                    "clientPort=%d" % self.client_ports[i],
                    "clientPortAddress=127.0.0.1",
                ] + harness.zoo_cfg_common(min_session, max_session) + [
                    "preAllocSize=4096",
                    "standaloneEnabled=false",
                    "reconfigEnabled=false",
                    "cnxTimeout=1000",
                ] + servers + [""]))
            env = dict(os.environ)
            env.update({
                "SERVER_JVMFLAGS": "-Xmx%s -XX:+UseSerialGC -XX:TieredStopAtLevel=1 "
                                   "-Dzookeeper.cnxTimeout=1000" % heap,
                "JMXDISABLE": "true", "ZOO_LOG_DIR": d,
                "ZOOPIDFILE": os.path.join(d, "zk.pid")})
            if clock_offsets and clock_offsets[i]:
                # its wall clock (the mtimes it stamps as leader) off by
                # that many seconds; its monotonic clock (sessions) true
                env.update({"LD_PRELOAD": harness.LIBFAKETIME, "FAKETIME": "%+d" % clock_offsets[i],
                            "FAKETIME_DONT_FAKE_MONOTONIC": "1"})
            self.procs.append(Proc("zookeeper%d" % (i + 1), [ZK_SERVER_SH, "start-foreground", cfg], d, env=env))

    # ------------------------------------------------------------ addresses
    def address(self, i):
        return "127.0.0.1:%d" % self.client_ports[i]

    @property
    def connect_string(self):
        return ",".join(self.address(i) for i in range(self.n))

    def data_dir(self, i):
        return os.path.join(self.dirs[i], "data")

    # ------------------------------------------------------------ status
    def four_letter(self, i, cmd, timeout=1.0):
        try:
            return four_letter("127.0.0.1", self.client_ports[i], cmd, timeout)
        except OSError:
            return ""

    def srvr(self, i, field, timeout=0.5):
        """A field of server i's `srvr` answer ("Mode", "Zxid"...), or None
        (not serving / down / stopped)."""
        if not self.procs[i].alive() or i in self.stopped:
            return None
        for line in self.four_letter(i, "srvr", timeout).splitlines():
            if line.startswith(field + ":"):
                return line.split(":", 1)[1].strip()
        return None

    def mode(self, i, timeout=0.5):
        """'leader', 'follower', or None (not serving / down / stopped)."""
        return self.srvr(i, "Mode", timeout)

    def epoch(self, timeout=0.5):
        """The largest epoch (a zxid's upper 32 bits) the serving servers
        report; it grows with every election.  0 when none answers."""
        zxids = [self.srvr(i, "Zxid", timeout) for i in self.up()]
        return max([int(z, 16) >> 32 for z in zxids if z] or [0])

    def up(self):
        """Indices of servers running and not stopped."""
        return [i for i in range(self.n) if self.procs[i].alive() and i not in self.stopped]

    def modes(self):
        return [self.mode(i) for i in range(self.n)]

    def leader(self, timeout=30):
        """Index of the leader once a quorum serves (waits for it)."""
        return self.wait_quorum(timeout)

    def followers(self, timeout=30):
        ld = self.wait_quorum(timeout)
        return [i for i in self.up() if i != ld]

    def wait_quorum(self, timeout=60, need_all=True):
        """Waits until every server that is up (or, with need_all=False, a
        majority) serves, exactly one of them as leader; returns the
        leader's index."""
        def ok():
            for i in range(self.n):
                p = self.procs[i]
                if p.popen is not None and not p.alive() and p.returncode is None:
                    raise Fatal("ZooKeeper %d exited: %s" % (i + 1, p.output()[-1500:].decode("utf-8", "replace")))
            up = self.up()
            modes = {i: self.mode(i) for i in up}
            serving = [i for i, m in modes.items() if m in ("leader", "follower")]
            leaders = [i for i, m in modes.items() if m == "leader"]
            if len(leaders) != 1:
                return None
            if need_all and len(serving) != len(up):
                return None
            if len(serving) * 2 <= self.n:
                return None
            return ("L", leaders[0])
        r = wait_for(ok, timeout, 0.05, "a ZooKeeper quorum with one leader (modes %r)" % (self.modes(),))
        return r[1]

    # ------------------------------------------------------------ lifecycle
    def start(self, timeout=90):
        for p in self.procs:
            p.start()
        self.wait_quorum(timeout)
        return self

    def start_server(self, i, wait=True, timeout=60):
        if self.procs[i].alive():
            raise AssertionError("ZooKeeper %d is already running" % (i + 1))
        self.stopped.discard(i)
        self.procs[i].start()
        if wait:
            self.wait_quorum(timeout)

    def kill9(self, i):
        self.stopped.discard(i)
        self.procs[i].kill9()

    def sigstop(self, i):
        self.procs[i].signal(signal.SIGSTOP)
        self.stopped.add(i)

    def sigcont(self, i):
        self.procs[i].signal(signal.SIGCONT)
        self.stopped.discard(i)

    def pause_all(self):
        for i in range(self.n):
            self.sigstop(i)

    def resume_all(self):
        for i in range(self.n):
            self.sigcont(i)

    def stop_all(self):
        """The whole ensemble down at once (kill -9 of every server)."""
        for i in range(self.n):
            self.procs[i].signal(signal.SIGKILL)
        for i in range(self.n):
            self.stopped.discard(i)
            try:
                self.procs[i].wait(10)
            except Exception:
                pass

    def start_all(self, wait=True, timeout=90):
        for i in range(self.n):
            if not self.procs[i].alive():
                self.procs[i].start()
        if wait:
            self.wait_quorum(timeout)

    def restore(self, timeout=90):
        """All servers up and running, a quorum, a leader: after any fault."""
        for i in list(self.stopped):
            self.sigcont(i)
        for i in range(self.n):
            if not self.procs[i].alive():
                self.procs[i].start()
        return self.wait_quorum(timeout)

    def close(self):
        for p in self.procs:
            p.kill_hard()

    # ------------------------------------------------------------ evidence
    def txn_log_files(self, i):
        d = os.path.join(self.data_dir(i), "version-2")
        try:
            names = sorted(n for n in os.listdir(d) if n.startswith("log."))
        except OSError:
            return []
        return [os.path.join(d, n) for n in names]


class ProxySet:
    """One ZkProxy per ensemble server, for one sidecar."""

    def __init__(self, ens):
        self.ens = ens
        self.proxies = [ZkProxy("127.0.0.1", ens.client_ports[i]) for i in range(ens.n)]
        harness.register_closer(self.close)

    @property
    def connect_string(self):
        return ",".join(p.address for p in self.proxies)

    def server_of(self, addr):
        """Server index behind the proxy address addr ('127.0.0.1:port'),
        or None."""
        if not addr:
            return None
        try:
            port = int(addr.rsplit(":", 1)[1])
        except (ValueError, IndexError):
            return None
        for i, p in enumerate(self.proxies):
            if p.port == port:
                return i
        return None

    def _times(self, kind):
        """Monotonic times, over all the proxies, of the sidecar's requests
        sent up ("asked") or of the replies to them sent down ("answered")."""
        return [t for p in self.proxies for t in getattr(p, "times_" + kind)()]

    def first_answer_after(self, t):
        """When the first reply to a request reached the sidecar at or after
        monotonic time t, or None."""
        return min((a for a in self._times("answered") if a >= t), default=None)

    def last_answer_before(self, t):
        """When the last reply reached the sidecar before t, or None."""
        return max((a for a in self._times("answered") if a < t), default=None)

    def asked_between(self, t_from, t_to):
        """How many requests and handshakes the sidecar sent in [t_from,
        t_to]."""
        return sum(1 for a in self._times("asked") if t_from <= a <= t_to)

    def delay(self, ms):
        for p in self.proxies:
            p.delay(ms)

    def blackhole(self, on):
        for p in self.proxies:
            p.blackhole(on)

    def cut(self):
        for p in self.proxies:
            p.cut()

    def close(self):
        for p in self.proxies:
            try:
                p.close()
            except Exception:
                pass


def now():
    return time.monotonic()


# --------------------------------------------------------------------------
# ZooKeeper transaction logs: the ground truth of what was written.
#
# Format (FileTxnLog, ZooKeeper 3.8): a file header (magic "ZKLG", version,
# dbid), then entries: crc (long), length (int; 0 = end, the rest of the file
# is preallocated zeros), the serialized TxnHeader + record (+ a digest),
# and an end-of-record byte 'B'.  Records are jute: int/long big-endian,
# ustring and buffer as an int length (-1: null) and bytes, vector as an int
# count and items, boolean as one byte.

import struct as _struct

TXN_NAMES = {1: "create", 2: "delete", 5: "setData", 7: "setACL", 13: "check", 14: "multi",
             15: "create2", 19: "createContainer", 21: "createTTL", -1: "error",
             -10: "createSession", -11: "closeSession", 16: "reconfig", 9: "sync"}


class _R:
    def __init__(self, b, p=0):
        self.b, self.p = b, p

    def i32(self):
        v = _struct.unpack_from(">i", self.b, self.p)[0]
        self.p += 4
        return v

    def i64(self):
        v = _struct.unpack_from(">q", self.b, self.p)[0]
        self.p += 8
        return v

    def boolean(self):
        v = self.b[self.p] != 0
        self.p += 1
        return v

    def buf(self):
        n = self.i32()
        if n < 0:
            return None
        v = bytes(self.b[self.p:self.p + n])
        self.p += n
        return v

    def ustr(self):
        v = self.buf()
        return None if v is None else v.decode("utf-8", "replace")


def _parse_op(t, r):
    """One write op: dict(op, path, data, ephemeral, version)."""
    if t in (1, 15):                                  # CreateTxn
        path, data = r.ustr(), r.buf()
        for _ in range(max(0, r.i32())):              # acl
            r.i32(); r.ustr(); r.ustr()
        eph = r.boolean()
        return {"op": "create", "path": path, "data": data, "ephemeral": eph}
    if t in (19, 21):                                 # CreateContainerTxn / CreateTTLTxn
        path, data = r.ustr(), r.buf()
        return {"op": "create", "path": path, "data": data, "ephemeral": False}
    if t == 2:
        return {"op": "delete", "path": r.ustr()}
    if t == 5:
        path, data = r.ustr(), r.buf()
        return {"op": "setData", "path": path, "data": data, "version": r.i32()}
    if t == 13:
        path = r.ustr()
        return {"op": "check", "path": path, "version": r.i32()}
    if t == -1:
        return {"op": "error", "err": r.i32()}
    return {"op": TXN_NAMES.get(t, str(t))}


def read_txn_log(path):
    """[entry]: dict(zxid, time_ms, session, cxid, type, ops=[op...]) of
    every transaction in one log file."""
    with open(path, "rb") as f:
        b = f.read()
    out = []
    if len(b) < 16 or b[:4] != b"ZKLG":
        return out
    p = 16
    while p + 12 <= len(b):
        _crc, n = _struct.unpack_from(">qi", b, p)
        if n <= 0 or p + 12 + n + 1 > len(b):
            break
        r = _R(b[p + 12:p + 12 + n])
        p += 12 + n + 1
        try:
            sess, cxid, zxid, tms, typ = r.i64(), r.i32(), r.i64(), r.i64(), r.i32()
            e = {"zxid": zxid, "time_ms": tms, "session": sess, "cxid": cxid,
                 "type": TXN_NAMES.get(typ, str(typ)), "ops": []}
            if typ == 14:
                for _ in range(max(0, r.i32())):
                    t = r.i32()
                    data = r.buf() or b""
                    e["ops"].append(_parse_op(t, _R(data)))
            elif typ in (1, 15, 19, 21, 2, 5, 13, -1):
                e["ops"].append(_parse_op(typ, r))
        except (_struct.error, IndexError):
            continue
        out.append(e)
    return out


def committed_txns(ens):
    """Every transaction found in the logs of a majority of the servers
    (a transaction logged by a quorum is committed), by zxid order."""
    seen = {}
    for i in range(ens.n):
        mine = {}
        for fpath in ens.txn_log_files(i):
            for e in read_txn_log(fpath):
                mine[e["zxid"]] = e
        for z, e in mine.items():
            cnt, first = seen.get(z, (0, e))
            seen[z] = (cnt + 1, first)
    need = ens.n // 2 + 1
    return [e for z, (cnt, e) in sorted(seen.items()) if cnt >= need]


def describe_txn(e, root=None, w0=None):
    """One line for a report: zxid, time, session, ops."""
    def p(path):
        if root and path and path.startswith(root):
            return "<root>" + path[len(root):]
        return path
    ops = []
    for o in e["ops"]:
        s = o["op"]
        if "path" in o:
            s += " " + p(o["path"])
        if o["op"] == "create" and o.get("ephemeral"):
            s += "(eph)"
        if o["op"] in ("setData", "check"):
            s += "@v%d" % o["version"]
        if o["op"] == "error":
            s += "(%d)" % o["err"]
        ops.append(s)
    t = e["time_ms"] / 1000.0
    when = "t=%.3f" % (t - w0) if w0 is not None else "wall=%.3f" % t
    return "zxid 0x%x %s session 0x%x %s{%s}" % (
        e["zxid"], when, e["session"] & 0xFFFFFFFFFFFFFFFF, e["type"], "; ".join(ops))
