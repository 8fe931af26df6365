"""Size limits of what an agent hands us to keep: a run's goal, plan and versions, and an
observation's summary (README and SECURITY.md, "Agent API limits").

Defined once here; the API's schemas document them (runs.schemas) and every path that stores
agent-supplied text (the REST API, the MCP gateway's countersign_start_run and its calls)
refuses through `agent_data_check`, before anything is written. Each of these ends up in the
run's events, its checkpoints and on every approver's page, so a body that fits the
1,000,000-byte request limit could otherwise make each of those a megabyte.
"""

from __future__ import annotations

from typing import Any

from control.canonical import canonical_json
from runs.exceptions import InvalidArguments

GOAL_MAX_CHARS = 2_000
SUMMARY_MAX_CHARS = 2_000
PLAN_MAX_BYTES = 65_536  # of its canonical JSON (UTF-8), as the checkpoint signs it
VERSIONS_MAX_KEYS = 32
VERSIONS_MAX_CHARS = 200  # each key, and each value (a value that is not a string: its JSON)


class TooLarge(InvalidArguments):
    """Agent data past its documented limit: `field` and `limit` say which and how much."""

    def __init__(self, field: str, limit: str, size: str) -> None:
        super().__init__(f"{field} is {size}; the limit is {limit} (Agent API limits)")
        self.field = field
        self.limit = limit
        self.rule = "too_large"


def agent_data_check(
    *,
    goal: str | None = None,
    summary: str | None = None,
    plan: dict[str, Any] | None = None,
    versions: dict[str, Any] | None = None,
) -> None:
    """Raises TooLarge for the first value past its limit, InvalidArguments for a plan or
    versions without a canonical JSON form (the checkpoint could not sign it)."""
    _text_check("goal", goal, GOAL_MAX_CHARS)
    _text_check("summary", summary, SUMMARY_MAX_CHARS)
    if plan is not None:
        size = len(_canonical("plan", plan))
        if size > PLAN_MAX_BYTES:
            raise TooLarge("plan", f"{PLAN_MAX_BYTES} bytes of canonical JSON", f"{size} bytes")
    if versions is not None:
        _canonical("versions", versions)
        _versions_check(versions)


def _text_check(field: str, value: str | None, limit: int) -> None:
    if value is not None and len(value) > limit:
        raise TooLarge(field, f"{limit} characters", f"{len(value)} characters")


def _canonical(field: str, value: dict[str, Any]) -> bytes:
    try:
        return canonical_json(value)
    except ValueError as error:
        raise InvalidArguments(f"{field}: {error}") from None


def _versions_check(versions: dict[str, Any]) -> None:
    if len(versions) > VERSIONS_MAX_KEYS:
        raise TooLarge("versions", f"{VERSIONS_MAX_KEYS} keys", f"{len(versions)} keys")
    for key, value in versions.items():
        _text_check(f"versions key {key[:40]!r}", key, VERSIONS_MAX_CHARS)
        shown = value if isinstance(value, str) else canonical_json(value).decode()
        _text_check(f"versions[{key[:40]!r}]", shown, VERSIONS_MAX_CHARS)
