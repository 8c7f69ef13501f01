"""RESP framing for tests: encode requests, cut exactly one reply off a byte
stream, decode it when a test wants values rather than bytes.

The framing parser knows every RESP2 and RESP3 type: simple string '+',
error '-', integer ':', bulk '$', array '*', null '_', double ',', boolean
'#', big number '(', blob error '!', verbatim '=', map '%', set '~',
attribute '|' (which prefixes the reply it annotates) and push '>'.
RawClient hands back raw bytes so tests can compare byte for byte.
"""

import socket
import time

LINE_TYPES = b"+-:_,#("
BULK_TYPES = b"$!="
AGG_TYPES = b"*~>"


class Incomplete(Exception):
    """The buffer does not hold a whole reply yet."""


class ProtocolViolation(Exception):
    """The bytes are not RESP."""


def encode(*args):
    """A RESP multibulk request; str arguments are UTF-8 encoded, ints are
    formatted in decimal."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, int):
            a = b"%d" % a
        elif not isinstance(a, (bytes, bytearray)):
            raise TypeError("bad argument %r" % (a,))
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def _line(buf, pos):
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise Incomplete()
    return buf[pos:end], end + 2


def frame_end(buf, pos=0):
    """Returns the offset just past the one complete reply that starts at
    pos, or raises Incomplete / ProtocolViolation."""
    if pos >= len(buf):
        raise Incomplete()
    t = buf[pos:pos + 1]
    line, nxt = _line(buf, pos + 1)
    if t in (b"+", b"-", b":", b"_", b",", b"#", b"("):
        return nxt
    if t in (b"$", b"!", b"="):
        try:
            n = int(line)
        except ValueError:
            raise ProtocolViolation("bad bulk length %r" % line)
        if n < 0:
            return nxt
        if len(buf) < nxt + n + 2:
            raise Incomplete()
        if buf[nxt + n:nxt + n + 2] != b"\r\n":
            raise ProtocolViolation("bulk not terminated by CRLF")
        return nxt + n + 2
    if t in (b"*", b"~", b">", b"%", b"|"):
        try:
            n = int(line)
        except ValueError:
            raise ProtocolViolation("bad aggregate length %r" % line)
        if n < 0:
            return nxt
        if t in (b"%", b"|"):
            n *= 2
        p = nxt
        for _ in range(n):
            p = frame_end(buf, p)
        if t == b"|":
            # An attribute is followed by the reply it describes.
            p = frame_end(buf, p)
        return p
    raise ProtocolViolation("unknown type byte %r at %d" % (t, pos))


class Err(str):
    """A decoded error reply."""


class Push(list):
    """A decoded RESP3 push frame."""


class Verbatim(bytes):
    pass


def decode(buf, pos=0):
    """Decodes one reply into Python values: bytes for strings, int, None,
    float, bool, Err, list, dict (maps), set-as-list (frozen order), Push.
    Returns (value, next_pos)."""
    t = buf[pos:pos + 1]
    line, nxt = _line(buf, pos + 1)
    if t == b"+":
        return line, nxt
    if t == b"-":
        return Err(line.decode("utf-8", "replace")), nxt
    if t == b":" or t == b"(":
        return int(line), nxt
    if t == b"_":
        return None, nxt
    if t == b",":
        return float(line), nxt
    if t == b"#":
        return line == b"t", nxt
    if t in (b"$", b"!", b"="):
        n = int(line)
        if n < 0:
            return None, nxt
        data = buf[nxt:nxt + n]
        if t == b"!":
            return Err(data.decode("utf-8", "replace")), nxt + n + 2
        if t == b"=":
            return Verbatim(data[4:]), nxt + n + 2
        return bytes(data), nxt + n + 2
    if t in (b"*", b"~", b">"):
        n = int(line)
        if n < 0:
            return None, nxt
        items = []
        p = nxt
        for _ in range(n):
            v, p = decode(buf, p)
            items.append(v)
        return (Push(items) if t == b">" else items), p
    if t == b"%":
        n = int(line)
        d = {}
        p = nxt
        for _ in range(n):
            k, p = decode(buf, p)
            v, p = decode(buf, p)
            if isinstance(k, list):
                k = tuple(k)
            d[k] = v
        return d, p
    if t == b"|":
        n = int(line)
        p = nxt
        for _ in range(2 * n):
            _, p = decode(buf, p)
        return decode(buf, p)
    raise ProtocolViolation("unknown type byte %r" % t)


def elements(raw):
    """(header line, [element frames]) of an aggregate reply (array, set,
    push, or map: keys and values alternate), or None for anything else or
    a null aggregate."""
    if raw[:1] not in (b"*", b"~", b"%", b">"):
        return None
    nl = raw.index(b"\r\n") + 2
    n = int(raw[1:nl - 2])
    if n < 0:
        return None
    if raw[:1] == b"%":
        n *= 2
    out, p = [], nl
    for _ in range(n):
        q = frame_end(raw, p)
        out.append(raw[p:q])
        p = q
    return raw[:nl], out


def parse_info(raw):
    """An INFO reply as a dict of field -> text: its bulk bytes, or the raw
    frame (the header line has no colon)."""
    if not isinstance(raw, bytes):
        raise AssertionError("INFO answered %r" % (raw,))
    out = {}
    for line in raw.decode("utf-8", "replace").splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = v.strip()
    return out


def decode_one(raw):
    v, p = decode(raw, 0)
    if p != len(raw):
        raise ProtocolViolation("trailing bytes after reply: %r" % raw[p:])
    return v


class ConnectionClosed(Exception):
    """The server closed the connection; .data holds what came before."""

    def __init__(self, data=b""):
        Exception.__init__(self, "connection closed by server (pending %r)" % bytes(data[:200]))
        self.data = bytes(data)


class RawClient:
    """A socket client that sends raw bytes and reads replies as raw bytes,
    exactly one complete RESP reply at a time."""

    def __init__(self, port, host="127.0.0.1", timeout=10.0, connect_timeout=5.0):
        self.host, self.port = host, port
        self.timeout = timeout
        self.sock = socket.create_connection((host, port), timeout=connect_timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(timeout)
        self.buf = bytearray()
        self.eof = False

    # -- sending
    def send(self, data):
        self.sock.sendall(data)

    def send_cmd(self, *args):
        self.sock.sendall(encode(*args))

    # -- receiving
    def _fill(self, deadline):
        if self.eof:
            raise ConnectionClosed(self.buf)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout("no complete reply within the timeout; have %r" % bytes(self.buf[:300]))
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(1 << 20)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
            raise ConnectionClosed(self.buf)
        self.buf += chunk

    def read_reply(self, timeout=None):
        """Returns the raw bytes of the next complete reply."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            try:
                end = frame_end(self.buf, 0)
            except Incomplete:
                self._fill(deadline)
                continue
            raw = bytes(self.buf[:end])
            del self.buf[:end]
            return raw

    def read_value(self, timeout=None):
        return decode_one(self.read_reply(timeout))

    def cmd(self, *args, timeout=None):
        """Sends one command and returns its raw reply."""
        self.send_cmd(*args)
        return self.read_reply(timeout)

    def call(self, *args, timeout=None):
        """Sends one command and returns its decoded reply."""
        return decode_one(self.cmd(*args, timeout=timeout))

    def read_until_close(self, timeout=5.0):
        """Reads everything until the server closes; returns the bytes
        (including anything already buffered).  Raises socket.timeout if the
        connection is still open after timeout."""
        deadline = time.monotonic() + timeout
        while not self.eof:
            try:
                self._fill(deadline)
            except ConnectionClosed:
                break
        data = bytes(self.buf)
        self.buf.clear()
        return data

    def is_closed(self, wait=0.0):
        """True if the server closed the connection (within wait seconds).
        Bytes that arrive meanwhile are kept in the buffer."""
        deadline = time.monotonic() + wait
        while not self.eof:
            remaining = deadline - time.monotonic()
            self.sock.settimeout(max(remaining, 0.001))
            try:
                chunk = self.sock.recv(1 << 20)
            except socket.timeout:
                if remaining <= 0:
                    return False
                continue
            except (ConnectionResetError, BrokenPipeError):
                chunk = b""
            if not chunk:
                self.eof = True
            else:
                self.buf += chunk
        return True

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
