"""The lock-history checker: proves mutual exclusion from the client side.

Each hold is recorded as (key, holder, token, t_acquire, t_release) on one
monotonic clock.  The recorded interval must lie inside the real one, so
that an overlap of recorded intervals proves an overlap of real holds:

  t_acquire  when the client *received* the OK (the lock was taken before)
  t_release  when the client *sent* the release, or, for a hold left to
             expire, the time the acquiring request was *sent* plus its TTL
             (expiry is counted no earlier than the write's acknowledgement,
             which came after the send)

check() asserts that no two holds of a key overlap and that the fencing
tokens (the znode's czxid) strictly increase in acquisition order.
"""

import math
import threading
import time


class Hold:
    __slots__ = ("key", "holder", "token", "fence", "t_acquire", "t_release", "note")

    def __init__(self, key, holder, token, fence, t_acquire):
        self.key, self.holder, self.token, self.fence = key, holder, token, fence
        self.t_acquire = t_acquire
        self.t_release = math.inf
        self.note = ""

    def __repr__(self):
        return "Hold(key=%r holder=%r token=%r fence=%r [%.6f, %.6f] %s)" % (
            self.key, self.holder, self.token, self.fence, self.t_acquire, self.t_release, self.note)


class LockHistory:
    def __init__(self):
        self.lock = threading.Lock()
        self.holds = []
        self.violations = []

    @staticmethod
    def now():
        return time.monotonic()

    def acquired(self, key, holder, token, t_acquire, fence=None, expires_at=None):
        """Records a hold; expires_at (send time + TTL) bounds it if it is
        never released explicitly."""
        h = Hold(key, holder, token, fence, t_acquire)
        if expires_at is not None:
            h.t_release = expires_at
        with self.lock:
            self.holds.append(h)
        return h

    def released(self, hold, t_release):
        with self.lock:
            hold.t_release = min(hold.t_release, t_release)

    def violation(self, text):
        """Something a client saw that proves a broken lock (e.g. a release
        of its own hold answered 0 long before its TTL)."""
        with self.lock:
            self.violations.append(text)

    def count(self, key=None, holder_prefix=None):
        with self.lock:
            return sum(1 for h in self.holds
                       if (key is None or h.key == key)
                       and (holder_prefix is None or str(h.holder).startswith(holder_prefix)))

    def problems(self):
        out = list(self.violations)
        by_key = {}
        with self.lock:
            for h in self.holds:
                by_key.setdefault(h.key, []).append(h)
        for key, holds in by_key.items():
            holds.sort(key=lambda h: h.t_acquire)
            for a, b in zip(holds, holds[1:]):
                if b.t_acquire < a.t_release:
                    out.append("overlap on %r: %r and %r (%.1f ms)" % (
                        key, a, b, 1000 * (min(a.t_release, time.monotonic()) - b.t_acquire)))
            fenced = [h for h in holds if h.fence is not None]
            for a, b in zip(fenced, fenced[1:]):
                if not b.fence > a.fence:
                    out.append("fencing token not increasing on %r: %r then %r" % (key, a, b))
        return out

    def check(self):
        probs = self.problems()
        assert not probs, "lock history violated:\n" + "\n".join(probs[:20])
