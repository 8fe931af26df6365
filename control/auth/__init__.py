"""People at the door: logging in, being refused, changing one's password; each audited.

- `clients`: who is asking (the client's address behind trusted proxies, the audit's actor).
- `throttle`: failed logins counted, and the lock on a username or address they trip.
- `summaries`: failures folded into one audit entry per period, not one entry a failure.
- `login`: the lock enforced on every `authenticate()`, and said in words on the login pages.
- `signals`: login, logout and failed login, audited and counted through Django's signals.
- `denials`: every 403 a person meets (and a logged-in person's failed CSRF) audited once.
- `passwords`: changing one's own password, throttled with the login and audited (no reset).

The agent API's bearer tokens are not here: control.api_kit.tokens.
"""

from __future__ import annotations

# Sessions store the dotted path of the backend that logged their person in, and Django logs
# out any session whose path is not in AUTHENTICATION_BACKENDS: the backend keeps the path it
# had before control/auth.py became this package, so no one is logged out by the move.
from control.auth.login import ThrottledModelBackend

__all__ = ["ThrottledModelBackend"]
