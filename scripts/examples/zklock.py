"""zklock.py -- zkresp's native locks (LOCK.ACQUIRE / LOCK.RELEASE) as a
Python context manager over redis-py.

    import redis
    from zklock import zk_lock, LockTimeout

    r = redis.Redis(port=6379, socket_timeout=30)
    with zk_lock(r, "orders", mode="EX", px=30000, wait=10000) as token:
        ...   # the lock is held; token is its fencing token

The block runs while the lock is held; the hold is released when the block
ends, also when it raises.  If the lock is not granted within `wait` ms,
LockTimeout is raised and the block does not run.

  owner  who holds the lock: a string unique to this holder (default: a
         fresh one per use, so a nested zk_lock of the same key waits
         rather than re-entering; pass the same owner to re-enter)
  mode   NL CR CW PR PW EX (SHARED = PR, EXCLUSIVE = EX), default EX
  px     the lease in ms: a hold is ended by zkresp if the block runs
         longer (renew it with LOCK.RENEW key owner PX ms for long work)
  wait   how long to wait for the grant, in ms (0: try once)

The client's socket_timeout must be longer than `wait` (or None): a
LOCK.ACQUIRE that waits is one command whose reply comes when the lock is
granted.  Pass the token to whatever the block writes so that it can refuse
writes from a holder whose lease had ended (fencing).
"""

import contextlib
import os
import socket
import uuid

__all__ = ["zk_lock", "LockTimeout"]


class LockTimeout(Exception):
    """The lock was not granted within the wait."""

    def __init__(self, key, mode, wait):
        Exception.__init__(self, "lock %r (mode %s) not granted within %d ms" % (key, mode, wait))
        self.key, self.mode, self.wait = key, mode, wait


def _socket_timeout(r):
    try:
        return r.connection_pool.connection_kwargs.get("socket_timeout")
    except AttributeError:
        return None


@contextlib.contextmanager
def zk_lock(r, key, owner=None, mode="EX", px=30000, wait=10000):
    if owner is None:
        owner = "%s:%d:%s" % (socket.gethostname(), os.getpid(), uuid.uuid4().hex)
    timeout = _socket_timeout(r)
    if timeout is not None and timeout * 1000 <= wait:
        raise ValueError("the client's socket_timeout (%ss) must be longer than wait (%d ms)" % (timeout, wait))
    token = r.execute_command("LOCK.ACQUIRE", key, owner, "MODE", mode, "PX", int(px), "WAIT", int(wait))
    if token is None:
        raise LockTimeout(key, mode, wait)
    failed = False
    try:
        yield token
    except BaseException:
        failed = True
        raise
    finally:
        try:
            r.execute_command("LOCK.RELEASE", key, owner)
        except Exception:
            # A failed release must not hide the block's own exception; the
            # lease ends the hold in any case.
            if not failed:
                raise
