"""One HTTP exchange bounded in bytes and in time, whatever the other side does.

A per-read timeout does not bound a call: a server that trickles a byte every few seconds
(in its headers or its body) never trips it, and a server that answers 200 MiB would have
every byte of it held in the worker's memory. So an answer is read as a stream and cut off
past `max_bytes`, and a watchdog timer shuts the connection's socket down once `max_seconds`
have passed since the call began, which wakes any read blocked on it, in headers or body.

The caller decides what a cut-off means (runs.tools.http: a write's outcome is unknown, a
read is transient); this module only says which limit was hit.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class AnswerLimits:
    """At most max_bytes of an answer's body; at most max_seconds for the whole call
    (None: the call's connect and read timeouts added up)."""

    max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    max_seconds: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.max_bytes, bool) or not isinstance(self.max_bytes, int):
            raise ValueError("max_bytes must be an integer")
        if self.max_bytes < 1:
            raise ValueError("max_bytes must be at least 1")
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ValueError("max_seconds must be > 0")

    def seconds(self, timeout: tuple[float, float]) -> float:
        return self.max_seconds if self.max_seconds is not None else sum(timeout)


DEFAULT_LIMITS = AnswerLimits()


class LimitExceeded(Exception):
    """The answer went past a limit; nothing more of it was read."""


class TooLarge(LimitExceeded):
    pass


class Overdue(LimitExceeded):
    pass


@dataclass(frozen=True)
class Exchange:
    status: int
    headers: Mapping[str, str]
    body: bytes


def exchange(
    method: str, url: str, *, timeout: tuple[float, float], limits: AnswerLimits, **kwargs: Any
) -> Exchange:
    """Send one request (requests' keyword arguments) and read its answer within limits:
    TooLarge or Overdue past them, requests' own exceptions otherwise."""
    seconds = limits.seconds(timeout)
    with _watched(seconds) as watchdog, requests.Session() as session:
        # An adapter of its own: closing the session closes its pools.
        adapter = _WatchedAdapter()
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        try:
            response = session.request(method, url, timeout=timeout, stream=True, **kwargs)
            try:
                body = _body(response, limits.max_bytes)
            finally:
                response.close()
        except requests.exceptions.RequestException as error:
            if watchdog.stop():
                raise Overdue(f"no complete answer within {seconds:g} s") from error
            raise
        # A server that closes a length-less answer when the socket is shut down looks done.
        if watchdog.stop():
            raise Overdue(f"no complete answer within {seconds:g} s")
        return Exchange(status=response.status_code, headers=response.headers, body=body)


def _body(response: requests.Response, max_bytes: int) -> bytes:
    body = bytearray()
    for chunk in response.iter_content(_CHUNK):
        body += chunk
        if len(body) > max_bytes:
            raise TooLarge(f"the answer is larger than {max_bytes} bytes")
    return bytes(body)


class _Watchdog:
    """Shuts the call's socket down once its time is up (the socket is handed over as soon
    as it is connected, so a trickled handshake or header is cut off too)."""

    def __init__(self, seconds: float) -> None:
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._expired = self._stopped = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def start(self) -> None:
        self._timer.start()

    def arm(self, sock: socket.socket) -> None:
        with self._lock:
            self._socket = sock
            if self._expired:
                _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._expired = True
            if self._socket is not None:
                _shut(self._socket)

    def stop(self) -> bool:
        """Stops the timer; whether the time had run out first."""
        self._timer.cancel()
        with self._lock:
            self._stopped = True
            return self._expired


def _shut(sock: socket.socket) -> None:
    # socket.socket's own shutdown, also under TLS: it wakes a read blocked in another
    # thread, where SSLSocket's would first unwrap. Already closed: nothing left to cut.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


_current = threading.local()


@contextmanager
def _watched(seconds: float) -> Iterator[_Watchdog]:
    watchdog = _Watchdog(seconds)
    _current.watchdog = watchdog
    watchdog.start()
    try:
        yield watchdog
    finally:
        watchdog.stop()
        _current.watchdog = None


def _arm(sock: socket.socket) -> None:
    watchdog = getattr(_current, "watchdog", None)
    if watchdog is not None:
        watchdog.arm(sock)


class _WatchedConnection(HTTPConnection):
    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        _arm(sock)
        return sock


class _WatchedTlsConnection(HTTPSConnection):
    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        _arm(sock)
        return sock


class _WatchedPool(HTTPConnectionPool):
    ConnectionCls = _WatchedConnection


class _WatchedTlsPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedTlsConnection


class _WatchedAdapter(HTTPAdapter):
    """requests' adapter whose connections hand their socket to the calling thread's
    watchdog. It keeps no connection between calls (each call closes its session)."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _WATCHED_POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        manager.pool_classes_by_scheme = _WATCHED_POOLS
        return manager


_WATCHED_POOLS = {"http": _WatchedPool, "https": _WatchedTlsPool}
