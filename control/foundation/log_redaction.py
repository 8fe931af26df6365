"""Decision tokens never reach a log.

A mail's decision link (`/decide/<token>/`) decides for whoever holds it until it is used or
expires (with a link-only policy, without a session), so a log line carrying it hands the
decision to everyone who reads the logs. gunicorn's access log (the request line, and the
Referer of every asset the decision page loads) and Django's request logging ("Not Found:
/decide/...") both name the path: both go through `without_decision_tokens` (gunicorn's
logger class is in control/gunicorn_config.py).
"""

from __future__ import annotations

import logging
import re

REDACTED = "[redacted]"
# The token (django.core.signing: base64url and ":") is one path segment after /decide/, which
# a login redirect's `?next=` may carry percent-encoded (`%2Fdecide%2F`, `:` as `%3A`).
_DECISION_TOKEN = re.compile(r"((?:/|%2F)decide(?:/|%2F))(?:[\w\-.:~]|%3A)+", re.IGNORECASE)


def without_decision_tokens(text: str) -> str:
    return _DECISION_TOKEN.sub(rf"\g<1>{REDACTED}", text)


class DecisionTokenFilter(logging.Filter):
    """On a handler: rewrites each record's message with its arguments already merged, so
    a token in an argument (Django passes the path as one) is redacted too."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = without_decision_tokens(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True
