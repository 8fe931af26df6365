"""Each pytest process claims a Redis database of its own, so two suites on one machine never
share one (picking `1 + pid % 15` let two processes land on the same database, where one's
flushdb emptied the other's queues).

The claim is a key in database 0, `countersign-test-redis-db:<n>`, set only if absent and
holding the owner's pid; a claim whose process is gone is taken over. The claim expires after
a day in case nothing removes it, and is removed at exit.
"""

from __future__ import annotations

import atexit
import os

import redis

DATABASES = range(1, 16)
CLAIM_SECONDS = 24 * 3600


def claim_redis_database(host: str = "127.0.0.1", port: int = 6379) -> int:
    """The number of a Redis database this process now holds alone."""
    server = redis.Redis(host=host, port=port, db=0, socket_timeout=5)
    pid = os.getpid()
    for number in DATABASES:
        key = f"countersign-test-redis-db:{number}"
        if server.set(key, pid, nx=True, ex=CLAIM_SECONDS) or _owner_gone(server, key, pid):
            atexit.register(_release, server, key, pid)
            return number
    raise RuntimeError(
        f"every Redis database {DATABASES.start}-{DATABASES.stop - 1} at {host}:{port} is "
        "held by a running test suite (keys countersign-test-redis-db:* in database 0)"
    )


def _owner_gone(server: redis.Redis, key: str, pid: int) -> bool:
    """Takes over `key` when the process that holds it no longer runs."""
    owner = server.get(key)
    if owner is None or not _running(int(owner)):
        # Compare-and-set: only one of two processes taking over a dead claim wins it.
        with server.pipeline() as pipe:
            try:
                pipe.watch(key)
                if pipe.get(key) != owner:
                    return False
                pipe.multi()
                pipe.set(key, pid, ex=CLAIM_SECONDS)
                pipe.execute()
            except redis.WatchError:
                return False
        return True
    return False


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _release(server: redis.Redis, key: str, pid: int) -> None:
    try:
        if server.get(key) == str(pid).encode():
            server.delete(key)
    except redis.RedisError:
        pass
