"""The key -> node name encoding of sidecar/keyenc.h, mirrored for tests.

Bytes in [A-Za-z0-9] and "-_:{}@=+,!" are kept; every other byte becomes
"%XX" (upper-case hex); the empty key is the name "%".
"""

import re

_KEEP = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_:{}@=+,!")


def encode(key):
    if isinstance(key, str):
        key = key.encode()
    if not key:
        return "%"
    return "".join(chr(b) if b in _KEEP else "%%%02X" % b for b in key)


_ESC = re.compile(r"%([0-9A-F]{2})")


def decode(name):
    """Inverse of encode; None if name is not something encode produces."""
    if name == "%":
        return b""
    out = bytearray()
    i = 0
    while i < len(name):
        c = name[i]
        if c == "%":
            m = _ESC.match(name, i)
            if not m:
                return None
            b = int(m.group(1), 16)
            if b in _KEEP:
                return None
            out.append(b)
            i += 3
        else:
            if ord(c) > 127 or ord(c) not in _KEEP:
                return None
            out.append(ord(c))
            i += 1
    return bytes(out)


def node_path(root, key):
    return "%s/k/%s" % (root.rstrip("/"), encode(key))
