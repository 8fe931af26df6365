"""Per-token limits of the agent API, kept in Redis so that every web process shares them.

- Request rate: at most `COUNTERSIGN_API_RATE_PER_MINUTE` requests per token in each fixed
  one-minute window (INCR and EXPIRE in one MULTI). The request over the limit is a 429
  `rate_limited` whose Retry-After is the seconds left in the window. A fixed window lets a
  client send up to twice the rate across a window boundary: the price of one counter.
- Concurrent long-polls: at most `COUNTERSIGN_API_MAX_LONG_POLLS` of one token wait at once,
  and at most `COUNTERSIGN_API_MAX_LONG_POLLS_PER_PROCESS` in one web process whatever their
  tokens (counted in the process: it is that process's threads they hold); one more is a 429
  `too_many_long_polls`. Each waiting poll is a member of a sorted set,
  scored by when its wait ends. It leaves the set in a `finally`; a poll whose process died
  drops out once its end is `LONG_POLL_GRACE_SECONDS` past, so a crash never leaks a slot.
- Redis unreachable: 503 `limits_unavailable` (fail closed): an API that cannot count its
  requests does not serve them unlimited.

A waiting long-poll holds no PostgreSQL connection (`sleep_without_database`): with
CONN_MAX_AGE a connection otherwise stays open between queries, one per waiting agent.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import redis
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse
from redis.exceptions import RedisError

from control.api_kit.problems import problem_response
from control.models import ApiToken

logger = logging.getLogger(__name__)
KEY_PREFIX = "countersign:api:"
WINDOW_SECONDS = 60
# How long past its end a long-poll still holds its slot (its last query may be slow).
LONG_POLL_GRACE_SECONDS = 30
REDIS_TIMEOUT_SECONDS = 2


class ApiLimited(Exception):
    """A request refused by a limit: answered as problem+json, with Retry-After if known."""

    def __init__(self, code: str, detail: str, retry_after: int | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.retry_after = retry_after


def limit_problem(request: HttpRequest, exc: ApiLimited) -> HttpResponse:
    """The exception handler control.api registers for ApiLimited."""
    response = problem_response(exc.code, exc.detail)
    if exc.retry_after is not None:
        response["Retry-After"] = str(exc.retry_after)
    return response


@functools.cache
def _client(url: str) -> redis.Redis:
    # One connection pool per URL and process, not a new connection per request.
    return redis.Redis.from_url(
        url, socket_timeout=REDIS_TIMEOUT_SECONDS, socket_connect_timeout=REDIS_TIMEOUT_SECONDS
    )


def _redis() -> redis.Redis:
    return _client(settings.REDIS_URL)


def _unavailable(error: RedisError) -> ApiLimited:
    return ApiLimited(
        "limits_unavailable",
        f"the API's request limits cannot be checked (Redis: {type(error).__name__}); "
        "retry shortly",
        retry_after=5,
    )


def _token_key(kind: str, token: ApiToken) -> str:
    # The token's hash, not its row id: ids restart with a new database, Redis keys do not.
    return f"{KEY_PREFIX}{kind}:{token.token_hash}"


def request_rate_check(token: ApiToken) -> None:
    """Counts one request of `token`; raises ApiLimited when it is over the rate."""
    limit = settings.COUNTERSIGN_API_RATE_PER_MINUTE
    now = time.time()
    window = int(now // WINDOW_SECONDS)
    window_ends = (window + 1) * WINDOW_SECONDS
    key = f"{_token_key('rate', token)}:{window}"
    try:
        with _redis().pipeline(transaction=True) as pipe:
            pipe.incr(key)
            # Relative, so that Redis' clock and ours need not agree.
            pipe.expire(key, WINDOW_SECONDS + 1)
            count, _ = pipe.execute()
    except RedisError as error:
        raise _unavailable(error) from error
    if count > limit:
        raise ApiLimited(
            "rate_limited",
            f"this token sent more than {limit} requests this minute; "
            f"retry after the Retry-After header's seconds",
            retry_after=max(1, math.ceil(window_ends - now)),
        )


class _ProcessSlots:
    """Long-polls waiting in this process, whatever their tokens: many tokens (or one agent
    with many) must not hold every thread of a web process, leaving none for other requests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.waiting = 0

    @contextmanager
    def held(self, seconds: float) -> Iterator[None]:
        limit = settings.COUNTERSIGN_API_MAX_LONG_POLLS_PER_PROCESS
        with self._lock:
            if self.waiting >= limit:
                raise ApiLimited(
                    "too_many_long_polls",
                    f"this server process already has {limit} long-polls waiting; retry "
                    "after the Retry-After header's seconds, or read without `wait`",
                    # A slot frees as soon as any poll here answers: soon, and never later
                    # than this wait would have lasted.
                    retry_after=max(1, min(PROCESS_RETRY_SECONDS, math.ceil(seconds))),
                )
            self.waiting += 1
        try:
            yield
        finally:
            with self._lock:
                self.waiting -= 1


PROCESS_RETRY_SECONDS = 5
process_long_polls = _ProcessSlots()


@contextmanager
def long_poll_slot(token: ApiToken, seconds: float) -> Iterator[None]:
    """Holds one of this process's long-poll slots and one of the token's for a wait of
    `seconds`; raises ApiLimited when either is full. Released when the block ends, however
    it ends."""
    with process_long_polls.held(seconds), _token_slot(token, seconds):
        yield


@contextmanager
def _token_slot(token: ApiToken, seconds: float) -> Iterator[None]:
    limit = settings.COUNTERSIGN_API_MAX_LONG_POLLS
    key = _token_key("long_polls", token)
    member = uuid.uuid4().hex
    now = time.time()
    ends = now + seconds
    try:
        with _redis().pipeline(transaction=True) as pipe:
            pipe.zremrangebyscore(key, "-inf", now - LONG_POLL_GRACE_SECONDS)
            pipe.zadd(key, {member: ends})
            pipe.zcard(key)
            pipe.zrange(key, 0, 1, withscores=True)
            pipe.expire(key, math.ceil(seconds + LONG_POLL_GRACE_SECONDS))
            _, _, waiting, soonest, _ = pipe.execute()
        if waiting > limit:
            # Over the limit: leave at once. Polls racing at the limit may all be refused,
            # never all admitted.
            _redis().zrem(key, member)
    except RedisError as error:
        raise _unavailable(error) from error
    if waiting > limit:
        first_end = next(score for name, score in soonest if name.decode() != member)
        raise ApiLimited(
            "too_many_long_polls",
            f"this token already has {limit} long-polls waiting; wait for one to answer, "
            "or read without `wait`",
            retry_after=max(1, math.ceil(first_end - now)),
        )
    try:
        yield
    finally:
        try:
            _redis().zrem(key, member)
        except RedisError as error:
            # The slot then drops out by itself once its end is past.
            logger.warning("long-poll slot not released: %s", error)


def sleep_without_database(seconds: float) -> None:
    """Sleeps holding no PostgreSQL connection; the next query opens a fresh one."""
    if connection.in_atomic_block:
        # Closing would abort the transaction: a long-poll must never run inside one.
        raise RuntimeError("a long-poll cannot sleep inside a database transaction")
    connection.close()
    time.sleep(seconds)
