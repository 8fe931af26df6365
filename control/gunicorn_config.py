"""gunicorn's settings for the web service: `gunicorn --config python:control.gunicorn_config
control.wsgi` (the Dockerfile's CMD and compose's `web`).

Threaded workers: an API long-poll (`?wait=`, at most 30 seconds) holds a thread, not a whole
process, and the arbiter's timeout watches each worker's main loop, so a long-poll is never
mistaken for a hung worker. Each thread keeps its own PostgreSQL connection, so workers x
threads must stay below the server's max_connections together with the RQ workers and sweepers.
"""

from __future__ import annotations

from gunicorn.glogging import Logger

from control.foundation.env import env_int
from control.foundation.log_redaction import without_decision_tokens

bind = "0.0.0.0:8000"
worker_class = "gthread"
workers = env_int("GUNICORN_WORKERS", 2, minimum=1)
threads = env_int("GUNICORN_THREADS", 8, minimum=1)
# A worker whose main loop is silent this long is killed and replaced.
timeout = env_int("GUNICORN_TIMEOUT", 60, minimum=1)
# On SIGTERM a worker finishes its requests first: longer than the longest long-poll.
graceful_timeout = 35
# One line per request on stdout, beside the application's logs on stderr.
accesslog = "-"


class RedactingAccessLogger(Logger):
    """gunicorn's logger with every access-log atom (request line, path, query, Referer,
    any header) cleared of decision tokens before the line is formatted."""

    def atoms(self, resp, req, environ, request_time):
        atoms = super().atoms(resp, req, environ, request_time)
        return {
            key: without_decision_tokens(value) if isinstance(value, str) else value
            for key, value in atoms.items()
        }


logger_class = RedactingAccessLogger


def on_starting(server) -> None:
    """Refuse to serve with connector files that do not load or tools whose definition changed
    under the same contract version (the `connectors` system check, runs/checks.py)."""
    import django
    from django.core.management import call_command
    from django.db import connections

    django.setup()
    try:
        call_command("check", tags=["connectors"])
    finally:
        connections.close_all()  # the workers fork from here: share no connection
