"""What the operator pages show, computed once per item: templates never compute or query."""

from __future__ import annotations

import unicodedata
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.text import Truncator
from django.utils.timesince import timeuntil

from control.web.pages import (
    compact_json,
    pretty_json,
)
from runs.action_ids import COMPENSATION_PREFIX
from runs.exceptions import CheckpointError, GrantMismatch, RunsError
from runs.models import Action, Approval, Receipt, Run, RunEvent
from runs.pages.lookalikes import Lookalike, lookalikes
from runs.record.checkpoints import checkpoint_verify
from runs.selectors import Duplicate, intent_summary
from runs.selectors.decision_views import decision_view, view_digest
from runs.tools.base import Tool
from runs.tools.errors import ToolError
from runs.tools.registry import get_tool

NOT_CONFIGURED = "tool not configured on this server"
MISSING_BINDING = (
    "The form did not carry the digest and state version you saw, so nothing was decided. "
    "Reload the inbox and look again."
)
REFUSAL_TITLES = {
    "digest": "Refused: the intent is not the one you saw",
    "state_version": "Refused: the run changed since you looked",
    "view": "Refused: the card changed since you looked",
    "expired": "Refused: the request has expired",
}


@dataclass
class Outcome:
    ok: bool
    title: str
    detail: str = ""
    diff: list = field(default_factory=list)


@dataclass(frozen=True)
class ToolText:
    """An intent's tool as the person deciding about it reads it: its connector and kind, and
    what it declares in words ("ticket · http — dedupes by key, can be queried by key").
    The registry is in memory: no query. A tool no longer configured says so."""

    name: str
    tool: Tool | None

    @classmethod
    def of(cls, name: str, contract_version: str) -> ToolText:
        try:
            return cls(name, get_tool(name, contract_version))
        except ToolError:
            return cls(name, None)

    @property
    def source(self) -> str:
        return f"{self.tool.connector} · {self.tool.kind}" if self.tool else ""

    @property
    def undo_text(self) -> str:
        """Whether anything undoes a write of the tool, in words."""
        if self.tool is None:
            return ""
        if self.tool.effect_class == "read_only":
            return "changes nothing"
        if self.tool.compensation:
            return f"undone by {self.tool.compensation}"
        return "cannot be undone"

    @property
    def phrases(self) -> list[str]:
        if self.tool is None:
            return []
        said = self.tool.capabilities()
        if self.tool.effect_class != "read_only":
            said.append(self.undo_text)
        return said

    def __str__(self) -> str:
        if self.tool is None:
            return NOT_CONFIGURED
        return f"{self.source} — {', '.join(self.phrases)}"


@dataclass
class CatalogEntry:
    """One tool at one contract version on the tools page: `tool` is its catalog entry
    (Tool.describe() with this tenant's needs_approval, from selectors.tool_catalog)."""

    tool: dict[str, Any]

    @property
    def anchor(self) -> str:
        return f"tool-{self.tool['name'].replace('.', '-')}-{self.tool['contract_version']}"

    @property
    def proof(self) -> str:
        """What ties a receipt to its intent."""
        if self.tool["effect_class"] == "read_only":
            return "none needed: a read changes nothing"
        return "the digest, echoed" if self.tool["echoes_digest"] else "the key alone"

    @cached_property
    def target_schema_json(self) -> str:
        return pretty_json(self.tool["target_schema"])

    @cached_property
    def args_schema_json(self) -> str:
        return pretty_json(self.tool["args_schema"])


class IntentText:
    """The intent's tool, target and arguments as shown, with their look-alike warnings."""

    action: Action

    @cached_property
    def tool_text(self) -> ToolText:
        return ToolText.of(self.action.tool, self.action.contract_version)

    @cached_property
    def args_json(self) -> str:
        return pretty_json(self.action.args)

    @cached_property
    def summary(self) -> str:
        """What the intent will do, in its tool's words (runs.tools.summaries); "" if none."""
        return intent_summary(self.action)

    @cached_property
    def view_digest(self) -> str:
        """The digest of the decision view the card shows (runs.selectors.decision_views)."""
        return view_digest(decision_view(self.action))

    @cached_property
    def target_lookalikes(self) -> list[Lookalike]:
        return lookalikes(self.action.target)

    @cached_property
    def args_lookalikes(self) -> list[Lookalike]:
        return lookalikes(self.args_json)


class PathsById:
    """Paths of URL names taking one id, for many ids: reverse() once per name with a stand-in
    id, then each id put in its place. An inbox page needs up to 225 such paths (5 an item),
    and each reverse() costs ~30 µs (~7 ms a page)."""

    STAND_IN = str(uuid.UUID(int=0))

    def __init__(self) -> None:
        self._patterns: dict[str, str] = {}

    def __call__(self, name: str, pk: uuid.UUID) -> str:
        if name not in self._patterns:
            self._patterns[name] = reverse(name, args=[self.STAND_IN])
        return self._patterns[name].replace(self.STAND_IN, str(pk))


@dataclass(frozen=True)
class Countdown:
    """A waiting request's expiry as the inbox prints it (in the current time zone, as the
    template filters `date` and `timeuntil` would, at a fifth of their cost)."""

    iso: str  # |date:"c"
    stamp: str  # |date:"Y-m-d H:i:s T"
    left: str  # |timeuntil:now

    @classmethod
    def of(cls, expires_at: datetime | None, now: datetime) -> Countdown | None:
        if expires_at is None:
            return None
        local = timezone.localtime(expires_at)
        # As `date` does, no zone name for a wall time that a clock change makes ambiguous.
        ambiguous = local.replace(fold=not local.fold).utcoffset() != local.utcoffset()
        stamp = f"{local:%Y-%m-%d %H:%M:%S} {'' if ambiguous else local.tzname()}"
        return cls(local.isoformat(), stamp, timeuntil(expires_at, now))


def truncated(text: str, length: int) -> str:
    """What `|truncatechars:length` prints, without its walk over every character when the
    text is short enough: it returns the text NFC-normalized then, and so does this."""
    normal = unicodedata.normalize("NFC", text)
    return normal if len(normal) <= length else Truncator(text).chars(length)


ITEM_URL_NAMES = {
    "approve": "inbox_approve",
    "edit": "inbox_edit",
    "reject": "inbox_reject",
    "ask_again": "inbox_ask_again",
}


@dataclass
class InboxItem(IntentText):
    """One request as the operator judges it; every value a template needs, computed here
    once (an inbox page renders up to 45 of them: each lookup and filter counts)."""

    action: Action
    now: datetime
    user_pk: int | None
    outcome: Outcome | None = None
    paths: PathsById = field(default_factory=PathsById, repr=False, compare=False)
    # Another open or recently executed intent with this digest (selectors.duplicate_intents).
    duplicate: Duplicate | None = None

    @cached_property
    def run(self) -> Run:
        return self.action.run

    @cached_property
    def pk(self) -> str:
        return str(self.action.pk)

    @cached_property
    def goal_text(self) -> str:
        return truncated(self.run.goal, 160)

    @cached_property
    def plan_text(self) -> str:
        plan = self.run.plan or {}
        if isinstance(plan.get("summary"), str):
            return plan["summary"]
        if isinstance(plan.get("steps"), list):
            return " → ".join(str(step) for step in plan["steps"])
        return compact_json(plan) if plan else ""

    @cached_property
    def budget_left(self) -> int | None:
        if self.run.budget_limit is None:
            return None
        return max(self.run.budget_limit - self.run.budget_used, 0)

    @cached_property
    def approvals(self) -> list[Approval]:
        return list(self.action.approvals.all())

    @cached_property
    def grants(self) -> list[Approval]:
        return [a for a in self.approvals if a.decision == Approval.Decision.APPROVE]

    @property
    def missing_approvals(self) -> int:
        return max(self.action.required_approvals - len(self.grants), 0)

    @cached_property
    def mine(self) -> Approval | None:
        return next((a for a in self.approvals if a.approver_id == self.user_pk), None)

    @cached_property
    def waiting(self) -> bool:
        return self.action.status == Action.Status.WAITING_APPROVAL

    @cached_property
    def expired(self) -> bool:
        return self.action.status == Action.Status.EXPIRED or (
            self.waiting
            and self.action.expires_at is not None
            and self.action.expires_at <= self.now
        )

    @cached_property
    def decidable(self) -> bool:
        return self.waiting and not self.expired and self.mine is None

    @property
    def run_moved(self) -> bool:
        """The run changed after the proposal by more than this request's own grants."""
        return self.waiting and self.run.state_version != self.action.base_version + len(
            self.grants
        )

    @property
    def selection(self) -> str:
        return f"{self.action.pk}/{self.action.base_version}/{self.action.intent_digest}"

    @cached_property
    def countdown(self) -> Countdown | None:
        return Countdown.of(self.action.expires_at, self.now)

    @cached_property
    def urls(self) -> dict[str, str]:
        """Where the item's forms post and its links lead."""
        urls = {key: self.paths(name, self.action.pk) for key, name in ITEM_URL_NAMES.items()}
        urls["run"] = self.paths("run_detail", self.run.pk)
        return urls


def inbox_items(
    request: HttpRequest,
    actions,
    outcome: Outcome | None = None,
    duplicates: dict[str, Duplicate] | None = None,
) -> list[InboxItem]:
    now, paths, duplicates = timezone.now(), PathsById(), duplicates or {}
    return [
        InboxItem(action, now, request.user.pk, outcome, paths, duplicates.get(str(action.pk)))
        for action in actions
    ]


def sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return text
    # A plain first word gets its capital; a name ("args.edits[1].newText") is kept as spelled.
    if text.split(" ", 1)[0].isalpha():
        text = text[0].upper() + text[1:]
    return text if text[-1] in ".!?" else text + "."


def refusal(error: RunsError | str) -> Outcome:
    """How a refusal reads to the operator: what was refused, why, and that nothing happened."""
    if isinstance(error, str):
        return Outcome(False, "Nothing was decided", sentence(error))
    if isinstance(error, GrantMismatch):
        title = REFUSAL_TITLES.get(error.rule, "Refused: the grant does not bind")
        return Outcome(False, title, f"{sentence(str(error))} Nothing was approved.")
    return Outcome(False, "Refused", f"{sentence(str(error))} Nothing was decided.")


@dataclass
class CheckpointView:
    checkpoint: object
    verified: bool
    problem: str = ""


@dataclass
class ActionView(IntentText):
    action: Action
    # A saga's links: the compensation proposed to undo this write, or the write this undoes.
    undone_by: Action | None = None
    undoes: Action | None = None

    @property
    def compensated(self) -> bool:
        """The write was undone: its compensation succeeded."""
        return self.undone_by is not None and self.undone_by.status == Action.Status.SUCCEEDED

    @cached_property
    def receipt(self):
        return getattr(self.action, "receipt", None)

    @property
    def receipt_matches(self) -> bool:
        return self.receipt is not None and self.receipt.intent_digest == self.action.intent_digest

    @property
    def receipt_attested(self) -> bool:
        """A receipt a reconciler made from what they saw (a record the probes read, a
        receipt id, the observed state), not one the system echoed with the digest."""
        return (
            self.receipt is not None
            and self.receipt.source == Receipt.Source.RECONCILER
            and self.receipt.status in (Receipt.OBSERVED, Receipt.ATTESTED)
        )


def action_views(actions: list[Action]) -> list[ActionView]:
    """A run's writes as shown, each saga compensation linked with the write it undoes
    (runs.services.saga names it COMPENSATION_PREFIX + the original's logical id)."""
    by_id = {action.action_id: action for action in actions}
    views = []
    for action in actions:
        original = None
        if action.action_id.startswith(COMPENSATION_PREFIX):
            original = by_id.get(action.action_id.removeprefix(COMPENSATION_PREFIX))
        undone_by = by_id.get(COMPENSATION_PREFIX + action.action_id)
        views.append(ActionView(action, undone_by=undone_by, undoes=original))
    return views


@dataclass
class EventView:
    event: RunEvent

    def __getattr__(self, name: str):
        return getattr(self.event, name)

    @cached_property
    def payload_json(self) -> str:
        return pretty_json(self.event.payload)


def verified_checkpoints(checkpoints, run: Run) -> list[CheckpointView]:
    """The latest checkpoint must also be the run's current state; older ones must verify."""
    views = []
    for index, checkpoint in enumerate(checkpoints):
        try:
            checkpoint_verify(checkpoint.body, run=run if index == 0 else None)
        except CheckpointError as error:
            views.append(CheckpointView(checkpoint, False, str(error)))
        else:
            views.append(CheckpointView(checkpoint, True))
    return views
