"""Two suites on one machine never share a Redis database (tests/redis_database.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import redis

from tests.redis_database import _owner_gone, _release, claim_redis_database


def test_each_claim_gets_a_database_no_running_process_holds():
    server = redis.Redis(db=0)
    mine = os.environ["REDIS_URL"].rsplit("/", 1)[1]
    assert server.get(f"countersign-test-redis-db:{mine}") == str(os.getpid()).encode()
    other = claim_redis_database()
    try:
        assert str(other) != mine
        assert claim_redis_database() not in (other, int(mine))
    finally:
        for number in range(1, 16):
            key = f"countersign-test-redis-db:{number}"
            if number != int(mine):
                _release(server, key, os.getpid())


def test_a_claim_whose_process_is_gone_is_taken_over_and_a_live_one_is_not():
    server = redis.Redis(db=0)
    key = "countersign-test-redis-db:probe-of-the-takeover"
    finished = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    try:
        server.set(key, finished.stdout.strip())
        assert _owner_gone(server, key, os.getpid())
        assert server.get(key) == str(os.getpid()).encode()
        assert not _owner_gone(server, key, 1)  # this process runs: its claim stays
        assert server.get(key) == str(os.getpid()).encode()
    finally:
        server.delete(key)
