"""A TCP proxy between zkresp and ZooKeeper that tests control.

It understands ZooKeeper's framing (4-byte length prefix; a request header
is xid + op type, a reply header xid + zxid + err; the first frame each way
is the session handshake), so faults can be aimed precisely:

    delay(ms)          hold every server->client frame back by ms
    drop_next_reply(ops, hold=False)
                       the next client request whose op is in ops goes to
                       the server (so it executes) but its reply is swallowed
                       and the connection is cut: an operation of unknown
                       outcome.  With hold=True the proxy then blackholes new
                       connections until blackhole(False).
    cut()              close every current connection
    blackhole(on)      accept and keep connections but forward nothing, in
                       either direction (closes are not forwarded either);
                       turning it off cuts the blackholed connections so the
                       client reconnects on a clean stream
    refuse(on)         close new connections as soon as they are accepted
    hold_next_watch(needle)
                       the next getData that sets a watch on a path
                       containing needle waits (with everything the client
                       sends after it) until release_hold(); wait_held tells
                       when it came

Counters: connections, requests by op name, replies, dropped, bytes.
Sessions seen in handshakes: (session_id, passwd, timeout).  Times: when
each request (xid > 0: not a ping) or handshake went up, and each reply to
a request (not to a handshake) came down (times_asked, times_answered):
what the client's ZooKeeper connection really answered, whatever the
fault's schedule was.  A handshake counts as asking: a client that only
tries to reconnect while no server serves (an election) asks for an
answer it does not get.
"""

import collections
import socket
import struct
import threading
import time

OPS = {
    0: "notification", 1: "create", 2: "delete", 3: "exists", 4: "getData",
    5: "setData", 6: "getACL", 7: "setACL", 8: "getChildren", 9: "sync",
    11: "ping", 12: "getChildren2", 13: "check", 14: "multi", 15: "create2",
    16: "reconfig", 17: "checkWatches", 18: "removeWatches",
    19: "createContainer", 20: "deleteContainer", 21: "createTTL",
    22: "multiRead", 100: "auth", 101: "setWatches", 102: "sasl",
    103: "getEphemerals", 104: "getAllChildrenNumber", 105: "setWatches2",
    106: "addWatch", 107: "whoAmI", -10: "createSession", -11: "closeSession",
}
OP_CODES = {v: k for k, v in OPS.items()}

WRITE_OPS = frozenset({"create", "create2", "createContainer", "createTTL",
                       "delete", "setData", "multi", "check"})
CREATE_OPS = frozenset({"create", "create2", "createContainer", "createTTL", "multi"})
DELETE_OPS = frozenset({"delete", "multi"})
# Requests that do not come from a client command: keepalives, session
# bookkeeping, watch re-registration.
HOUSEKEEPING_OPS = frozenset({"ping", "setWatches", "setWatches2", "auth", "closeSession"})


def _free_listener():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    return s


def _shutdown(sock):
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _close(sock):
    if sock is None:
        return
    _shutdown(sock)
    try:
        sock.close()
    except OSError:
        pass


class _FrameReader:
    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray()

    def frames(self):
        """Yields complete frames (with their length prefix) until EOF."""
        while True:
            while len(self.buf) >= 4:
                n = struct.unpack(">i", self.buf[:4])[0]
                if n < 0 or n > 64 << 20:
                    raise ValueError("bad ZooKeeper frame length %d" % n)
                if len(self.buf) < 4 + n:
                    break
                frame = bytes(self.buf[:4 + n])
                del self.buf[:4 + n]
                yield frame
            try:
                chunk = self.sock.recv(1 << 16)
            except OSError:
                return
            if not chunk:
                return
            self.buf += chunk


class _Conn:
    def __init__(self, proxy, csock, blackholed):
        self.proxy = proxy
        self.csock = csock
        self.ssock = None
        self.blackholed = blackholed
        self.closed = False
        self.drop_xid = None
        self.queue = collections.deque()
        self.cv = threading.Condition()
        self.lock = threading.Lock()
        self.running = 0        # forwarding threads still using the sockets
        self.swap = None        # a reply held back to go after the next one

    def start(self):
        """Connects upstream and starts forwarding, in a thread of its own:
        a stopped server's connect must not hold up the next accept."""
        threading.Thread(target=self._start, daemon=True).start()

    def _start(self):
        try:
            if not self.blackholed:
                self.ssock = socket.create_connection(self.proxy.upstream, timeout=5)
                self.ssock.settimeout(None)
                self.ssock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                closed = self.closed
            if closed:              # cut while it connected
                _close(self.ssock)
                return
            self.csock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.running = 3
            for fn in (self._up, self._down, self._writer):
                threading.Thread(target=self._run, args=(fn,), daemon=True).start()
        except Exception:  # noqa: BLE001 - a connection that cannot start is closed, never the proxy
            self.proxy._count("start_failed")
            self.close()

    def _run(self, fn):
        try:
            fn()
        finally:
            with self.lock:
                self.running -= 1
                last = self.running == 0 and self.closed
            if last:
                self._release()

    def _release(self):
        _close(self.csock)
        _close(self.ssock)

    def close(self):
        """Shuts both sockets down, which ends the forwarding threads; the
        last of them closes them.  Closing a socket another thread is still
        sending on would free its descriptor for the next connection, which
        may then receive what was meant for this one."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            idle = self.running == 0
        _shutdown(self.csock)
        _shutdown(self.ssock)
        if idle:
            self._release()
        with self.cv:
            self.cv.notify_all()
        self.proxy._forget(self)

    # client -> server
    def _up(self):
        first = True
        try:
            for frame in _FrameReader(self.csock).frames():
                p = self.proxy
                if self.blackholed:
                    p._count("blackholed_up")
                    continue
                req = False
                if first:
                    first = False
                    p._count("handshakes")
                    req = True
                else:
                    xid, op = struct.unpack(">ii", frame[4:12])
                    req = xid > 0
                    name = OPS.get(op, str(op))
                    p._count_req(name)
                    if name not in HOUSEKEEPING_OPS:
                        p.frames.append((name, frame))
                    with p.lock:
                        holed = p._hole_ops is not None and xid > 0 and name in p._hole_ops
                        if holed:
                            p._hole_ops = None
                            p._blackhole = self.blackholed = True
                        armed = None if holed else p._drop_ops
                        if armed is not None and xid > 0 and name in armed and \
                                (p._drop_needle is None or p._drop_needle in frame):
                            p._drop_ops = None
                            self.drop_xid = xid
                            p._drop_target = (self, xid, name)
                    if holed:
                        p._count("blackholed_up")
                        p._hole_event.set()
                        continue
                    if p._held_by(name, frame):
                        p._hold_event.set()
                        p._hold_release.wait(30)
                p._add("bytes_up", len(frame))
                if self.ssock is None:
                    continue
                self.ssock.sendall(frame)
                if req:
                    p.asked.append(time.monotonic())
        except OSError:
            pass
        if not self.blackholed:
            self.close()

    # server -> client
    def _down(self):
        if self.ssock is None:
            return
        first = True
        try:
            for frame in _FrameReader(self.ssock).frames():
                p = self.proxy
                if self.blackholed:
                    p._count("blackholed_down")
                    continue
                reply = False
                if first:
                    first = False
                    p._record_session(frame)
                else:
                    xid = struct.unpack(">i", frame[4:8])[0]
                    if self.drop_xid is not None and xid == self.drop_xid:
                        self.drop_xid = None
                        p._dropped(self)
                        self._enqueue(None)  # cut after what came before
                        return
                    p._count("replies")
                    reply = xid > 0
                    if reply and p._take_swap():
                        self.swap = frame    # goes after the next reply
                        continue
                self._enqueue(frame, reply)
                if reply and self.swap is not None:
                    held, self.swap = self.swap, None
                    p._count("swapped")
                    self._enqueue(held, True)
        except (OSError, ValueError):
            pass
        if not self.blackholed:
            self._enqueue(None)

    def _enqueue(self, frame, reply=False):
        with self.cv:
            self.queue.append((time.monotonic() + self.proxy._delay, frame, reply))
            self.cv.notify()

    def _writer(self):
        while True:
            with self.cv:
                while not self.queue and not self.closed:
                    self.cv.wait()
                if self.closed:
                    return
                due, frame, reply = self.queue.popleft()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if frame is None:
                self.close()
                return
            if self.blackholed:
                continue
            try:
                self.csock.sendall(frame)
                self.proxy._add("bytes_down", len(frame))
                if reply:
                    self.proxy.answered.append(time.monotonic())
            except OSError:
                self.close()
                return


class ZkProxy:
    def __init__(self, upstream_host, upstream_port):
        self.upstream = (upstream_host, upstream_port)
        self.listener = _free_listener()
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.conns = set()
        self.counters = collections.Counter()
        self.requests = collections.Counter()
        self.sessions = []
        self.frames = collections.deque(maxlen=20000)   # (op name, request frame)
        self.asked = collections.deque(maxlen=200000)   # monotonic times, requests sent up
        self.answered = collections.deque(maxlen=200000)  # monotonic times, replies sent down
        self._delay = 0.0
        self._blackhole = False
        self._swap_armed = False
        self._refuse = False
        self._drop_ops = None
        self._drop_needle = None
        self._drop_target = None
        self._drop_hold = False
        self._drop_event = threading.Event()
        self._hole_ops = None
        self._hole_event = threading.Event()
        self._hold_needle = None
        self._hold_op = None
        self._hold_watch = False
        self._hold_event = threading.Event()
        self._hold_release = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    # -- controls
    def delay(self, ms):
        """Delay every server->client frame by ms from now on (0: none)."""
        self._delay = ms / 1000.0

    def swap_next_replies(self):
        """Arms the fault: the next reply is held back and sent after the
        one that follows it, out of order (as a faulty server may; the
        client drops the connection)."""
        with self.lock:
            self._swap_armed = True

    def _take_swap(self):
        with self.lock:
            armed = self._swap_armed
            self._swap_armed = False
        return armed

    def drop_next_reply(self, ops=WRITE_OPS, hold=False, needle=None):
        """Arms the fault: the next request with an op in ops (and, given
        needle, bytes in its frame: a path) executes but its reply is lost
        and the connection is cut."""
        with self.lock:
            self._drop_event.clear()
            self._drop_target = None
            self._drop_hold = hold
            self._drop_needle = needle.encode() if isinstance(needle, str) else needle
            self._drop_ops = frozenset(ops)

    def blackhole_at_next(self, ops):
        """Arms the fault: the next request with an op in ops is not sent on,
        and from it on the proxy is a blackhole (blackhole(True)) until
        blackhole(False); wait_holed tells when it happened."""
        with self.lock:
            self._hole_event.clear()
            self._hole_ops = frozenset(ops)

    def wait_holed(self, timeout=10.0):
        return self._hole_event.wait(timeout)

    def hold_next_watch(self, needle):
        """Arms the fault: the next getData with its watch flag set, on a
        path containing needle, is held back with whatever its connection
        sends after it (the order kept) until release_hold()."""
        self._arm_hold("getData", needle, True)

    def hold_next(self, op, needle):
        """Arms the fault: the next request of op (a name of OPS, "multi")
        whose frame contains needle is held back, with whatever its
        connection sends after it (the order kept), until release_hold():
        a request that reaches ZooKeeper late."""
        self._arm_hold(op, needle, False)

    def _arm_hold(self, op, needle, watch):
        with self.lock:
            self._hold_event.clear()
            self._hold_release.clear()
            self._hold_op, self._hold_watch = op, watch
            self._hold_needle = needle.encode()

    def _held_by(self, name, frame):
        """Whether the request frame (of op name) is the one hold_next or
        hold_next_watch armed for (then disarmed)."""
        with self.lock:
            if self._hold_needle is None or name != self._hold_op:
                return False
            if self._hold_watch:
                n = struct.unpack(">i", frame[12:16])[0]
                path, watch = frame[16:16 + n], frame[16 + n:17 + n]
                if watch != b"\x01" or self._hold_needle not in path:
                    return False
            elif self._hold_needle not in frame:
                return False
            self._hold_needle = None
            return True

    def wait_held(self, timeout=10.0):
        return self._hold_event.wait(timeout)

    def release_hold(self):
        self._hold_release.set()

    def wait_dropped(self, timeout=10.0):
        """True once an armed drop happened; the dropped op is in .dropped_op."""
        return self._drop_event.wait(timeout)

    @property
    def dropped_op(self):
        t = self._drop_target
        return t[2] if t else None

    def cut(self):
        """Closes every current connection."""
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            c.close()
        self._count("cuts")

    def blackhole(self, on):
        with self.lock:
            self._blackhole = bool(on)
            conns = list(self.conns)
            if on:
                for c in conns:
                    c.blackholed = True
        if not on:
            for c in conns:
                if c.blackholed:
                    c.close()

    def refuse(self, on):
        self._refuse = bool(on)

    def close(self):
        self._closed = True
        self._hold_release.set()
        _close(self.listener)
        self.cut()

    # -- observation
    def snapshot(self):
        with self.lock:
            return {"counters": dict(self.counters), "requests": dict(self.requests)}

    def command_requests(self):
        """Requests other than keepalives and session bookkeeping."""
        with self.lock:
            return sum(n for op, n in self.requests.items() if op not in HOUSEKEEPING_OPS)

    def write_requests(self):
        with self.lock:
            return sum(n for op, n in self.requests.items() if op in WRITE_OPS)

    def requests_containing(self, needle):
        """(op, frame) of every logged request whose bytes contain needle
        (e.g. a node name): what reached ZooKeeper about a key."""
        with self.lock:
            return [(op, f) for op, f in self.frames if needle in f]

    def times_asked(self):
        return list(self.asked)

    def times_answered(self):
        return list(self.answered)

    def accepting(self):
        """Whether the accept loop still runs."""
        return self._thread.is_alive()

    def open_connections(self):
        with self.lock:
            return len(self.conns)

    def last_session(self):
        with self.lock:
            return self.sessions[-1] if self.sessions else None

    # -- internals
    def _accept(self):
        while not self._closed:
            try:
                csock, _ = self.listener.accept()
            except OSError:
                return
            self._count("connections")
            if self._refuse:
                _close(csock)
                self._count("refused")
                continue
            try:
                with self.lock:
                    c = _Conn(self, csock, self._blackhole)
                    self.conns.add(c)
                c.start()
            except Exception:  # noqa: BLE001 - e.g. no thread to spare: drop this one, keep accepting
                self._count("start_failed")
                _close(csock)

    def _forget(self, conn):
        with self.lock:
            self.conns.discard(conn)

    def _count(self, name, n=1):
        with self.lock:
            self.counters[name] += n

    _add = _count

    def _count_req(self, name):
        with self.lock:
            self.requests[name] += 1

    def _record_session(self, frame):
        try:
            _ver, timeout, sid, plen = struct.unpack(">iiqi", frame[4:24])
            passwd = frame[24:24 + plen] if plen > 0 else b""
        except struct.error:
            return
        with self.lock:
            self.sessions.append((sid, passwd, timeout))

    def _dropped(self, conn):
        with self.lock:
            self.counters["dropped"] += 1
            if self._drop_hold:
                self._blackhole = True
        self._drop_event.set()
