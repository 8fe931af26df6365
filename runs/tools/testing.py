"""The tool contract, checked against the real system behind a tool: for any adapter's tests.

A connector (any kind) or a `python` tool class promises things Countersign relies on when a
worker dies mid-call: that one key is applied once, that a query by key finds what was done,
that refused arguments send nothing. This suite calls the tool against its own system (a
sandbox, a staging account, a local server) and checks each promise the tool declares:

    from runs.tools.registry import get_tool
    from runs.tools.testing import ContractSuite, System, report

    tickets = iter(range(1, 101))
    system = System(
        # A fresh, valid (target, args), as an agent would propose it: every call gets its own
        # target where the system refuses a second write to one (a ticket closes once).
        make_call=lambda: (f"ticket-{next(tickets)}", {"resolution": "fixed"}),
        # Optional: how many effects the system has performed (for this tool) so far.
        count_effects=lambda: len(ledger_of("ticket.close")),
    )
    outcome = ContractSuite(get_tool("ticket.close"), system).run()
    print(outcome.line())   # ticket.close v1: 11 passed, 2 not applicable (read_only_...: ...)
    outcome.assert_passed()  # AssertionError naming every failed check and why

Each check passes, fails (with why), or is not applicable (with why): nothing is skipped
silently. The checks, in order:

- `flags_are_consistent` (every tool): a known effect class; a write that does not dedupe
  by key never allows a resend after an uncertain outcome; an answered failure of a write
  whose effect class is not resendable is an unknown outcome.
- `uncertain_means_unknown_outcome` (every tool): `outcome_unknown_after(ResultUncertain)`.
- `read_only_needs_no_idempotency` (read_only): an answered transient failure of a read is
  not an unknown outcome; the read is simply sent again, with no key.
- `normalize_is_idempotent` (every tool): normalizing twice changes nothing, so the intent
  digest is stable.
- `invalid_args_are_refused` (every tool): an unknown argument is InvalidArguments, from
  normalize() and from execute(); `invalid_args_make_no_effect` (with count_effects): and
  the system performed nothing.
- `execute_returns_a_receipt` (every tool): a receipt of the shape ToolReceipt requires,
  with the call's digest and, for a tool that dedupes by key, the call's key.
- `write_makes_one_effect` (writes, with count_effects): one execute, one effect;
  `read_makes_no_effect` (read_only, with count_effects): one execute, none.
- `query_finds_the_receipt` (queryable_by_key): after execute, query(key) answers the same
  receipt id and digest; `query_of_an_unused_key_is_none` (queryable_by_key): query of a key
  never sent is None, not an error.
- `same_call_twice_same_receipt` (dedupes_by_key): the same call again answers the same
  receipt; `same_call_twice_one_effect` (dedupes_by_key, with count_effects): and the system
  performed it once (a read: never).

Every execute uses a fresh idempotency key and a fresh (target, args) from make_call, so the
checks do not depend on each other. Against a system that must not be written to,
`writes_allowed=False` leaves out (as not applicable) every check that would execute a
write; `manage.py connectors test` runs the suite so, against a tool's configured system,
unless given --allow-writes. tests/tools/test_contract_suite.py runs it against the sandbox's
five tools and the benchmark's two; docs/CONNECTORS.md shows it for a new connector.
"""

from __future__ import annotations

import itertools
import random
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from control.foundation.canonical import intent_digest
from runs.tools.base import EFFECT_CLASSES, RESENDABLE_EFFECT_CLASSES, Tool
from runs.tools.calls import Timeout, ToolCall, ToolReceipt
from runs.tools.errors import InvalidArguments, ResultUncertain, TransientError

PASSED, FAILED, NOT_APPLICABLE = "passed", "failed", "not applicable"
# Every args_schema is a closed object (runs.tools.schema): this argument is always refused.
UNKNOWN_ARGUMENT = "not_an_argument_of_this_tool"


@dataclass(frozen=True)
class System:
    """The system under a tool, as far as the checks need it."""

    # A fresh, valid (target, args) for one call, as an agent would propose it; None when
    # there is none to make, and the checks that need a call are then not applicable.
    make_call: Callable[[], tuple[str, dict[str, Any]]] | None
    # The number of effects the system has performed so far (for this tool); None when the
    # system cannot tell, and the checks that count effects are then not applicable.
    count_effects: Callable[[], int] | None = None
    timeout: Timeout = (3.05, 10.0)
    # False against a system that must not be written to: the checks that would execute a
    # write (a write tool's execute, however invalid its arguments) are then not applicable.
    writes_allowed: bool = True


@dataclass(frozen=True)
class CheckResult:
    name: str
    outcome: str
    detail: str = ""


@dataclass
class ContractReport:
    """What the suite found for one tool at one contract version."""

    tool: str
    results: list[CheckResult] = field(default_factory=list)

    def named(self, outcome: str) -> list[CheckResult]:
        return [result for result in self.results if result.outcome == outcome]

    def line(self) -> str:
        """'ticket.close v1: 11 passed, 2 not applicable (name: why; ...)', failures first."""
        parts = []
        for outcome in (FAILED, PASSED, NOT_APPLICABLE):
            results = self.named(outcome)
            if not results:
                continue
            part = f"{len(results)} {outcome}"
            if outcome != PASSED:
                part += " (" + "; ".join(f"{r.name}: {r.detail}" for r in results) + ")"
            parts.append(part)
        return f"{self.tool}: " + ", ".join(parts)

    def assert_passed(self) -> None:
        failed = self.named(FAILED)
        if failed:
            lines = [f"{self.tool} breaks its contract:"]
            lines += [f"  {result.name}: {result.detail}" for result in failed]
            raise AssertionError("\n".join(lines))


def report(reports: Iterable[ContractReport]) -> list[str]:
    """One line per tool, for a closing note."""
    return [each.line() for each in reports]


class _Failed(Exception):
    pass


class _NotApplicable(Exception):
    pass


def _expect(condition: bool, detail: str) -> None:
    if not condition:
        raise _Failed(detail)


def _same(receipt: ToolReceipt, other: ToolReceipt) -> bool:
    """The same receipt, whatever bytes carried it."""
    fields = ("receipt_id", "intent_digest", "idempotency_key", "status", "target_version")
    return all(getattr(receipt, name) == getattr(other, name) for name in fields)


class ContractSuite:
    """The checks for one tool against its system; run() answers a ContractReport."""

    CHECKS = (
        "flags_are_consistent",
        "uncertain_means_unknown_outcome",
        "read_only_needs_no_idempotency",
        "normalize_is_idempotent",
        "invalid_args_are_refused",
        "invalid_args_make_no_effect",
        "execute_returns_a_receipt",
        "write_makes_one_effect",
        "read_makes_no_effect",
        "query_finds_the_receipt",
        "query_of_an_unused_key_is_none",
        "same_call_twice_same_receipt",
        "same_call_twice_one_effect",
    )

    def __init__(self, tool: Tool, system: System) -> None:
        self.tool = tool
        self.system = system

    def run(self) -> ContractReport:
        outcome = ContractReport(f"{self.tool.name} {self.tool.contract_version}")
        for name in self.CHECKS:
            try:
                getattr(self, name)()
            except _NotApplicable as reason:
                outcome.results.append(CheckResult(name, NOT_APPLICABLE, str(reason)))
            except _Failed as why:
                outcome.results.append(CheckResult(name, FAILED, str(why)))
            except Exception as error:  # anything else a check meets is the tool's failure
                outcome.results.append(
                    CheckResult(name, FAILED, f"{type(error).__name__}: {error}")
                )
            else:
                outcome.results.append(CheckResult(name, PASSED))
        return outcome

    # Calls and effects.

    @property
    def read_only(self) -> bool:
        return self.tool.effect_class == "read_only"

    def fresh_input(self) -> tuple[str, dict[str, Any]]:
        """make_call()'s (target, args), normalized."""
        target, args = self._made()
        return self.tool.normalize(target=target, args=args)

    def _made(self) -> tuple[str, dict[str, Any]]:
        if self.system.make_call is None:
            raise _NotApplicable("no call given to make (a target and arguments)")
        target, args = self.system.make_call()
        return target, args

    def fresh_call(self) -> ToolCall:
        return self._call(*self.fresh_input())

    def _call(self, target: str, args: dict[str, Any]) -> ToolCall:
        return _frozen(self.tool, target, args, key=self.fresh_key(target))

    def fresh_key(self, target: str) -> str:
        return f"contract-suite:{uuid.uuid4().hex}:{target}:{self.tool.contract_version}"

    def execute(self, call: ToolCall) -> ToolReceipt:
        if not (self.read_only or self.system.writes_allowed):
            raise _NotApplicable("it would send a write, and writes are not allowed here")
        return self.tool.execute(call, timeout=self.system.timeout)

    def effects(self) -> int:
        if self.system.count_effects is None:
            raise _NotApplicable("no effect counter given")
        return self.system.count_effects()

    def needs(self, condition: bool, reason: str) -> None:
        if not condition:
            raise _NotApplicable(reason)

    # What the tool declares.

    def flags_are_consistent(self) -> None:
        tool = self.tool
        _expect(tool.effect_class in EFFECT_CLASSES, f"unknown effect class {tool.effect_class!r}")
        for flag in ("needs_approval", "dedupes_by_key", "queryable_by_key", "echoes_digest"):
            _expect(isinstance(getattr(tool, flag), bool), f"{flag} is not true or false")
        if not self.read_only and not tool.dedupes_by_key:
            _expect(
                not tool.retry_after_uncertain_allowed,
                "it does not dedupe by key, yet allows a resend after an uncertain outcome",
            )
        if tool.effect_class not in RESENDABLE_EFFECT_CLASSES:
            answered = TransientError("HTTP 503", http_status=503)
            _expect(
                tool.outcome_unknown_after(answered),
                f"an answered 503 of a {tool.effect_class} write is not taken as an unknown "
                "outcome: it would be sent again",
            )

    def uncertain_means_unknown_outcome(self) -> None:
        _expect(
            self.tool.outcome_unknown_after(ResultUncertain("no answer")),
            "outcome_unknown_after(ResultUncertain) is false",
        )

    def read_only_needs_no_idempotency(self) -> None:
        self.needs(self.read_only, f"it writes ({self.tool.effect_class})")
        answered = TransientError("HTTP 503", http_status=503)
        _expect(
            not self.tool.outcome_unknown_after(answered),
            "an answered 503 of a read is taken as an unknown outcome",
        )

    def normalize_is_idempotent(self) -> None:
        target, args = self._made()
        once = self.tool.normalize(target=target, args=args)
        twice = self.tool.normalize(target=once[0], args=once[1])
        _expect(once == twice, f"normalizing {once!r} again gives {twice!r}")
        digests = {
            intent_digest(tool=self.tool.name, target=normal[0], args=normal[1])
            for normal in (once, twice)
        }
        _expect(len(digests) == 1, "the intent digest changes when normalized again")

    def _invalid_call(self) -> ToolCall:
        target, args = self.fresh_input()
        return self._call(target, {**args, UNKNOWN_ARGUMENT: True})

    def _refused(self, call: ToolCall) -> None:
        try:
            self.execute(call)
        except InvalidArguments:
            return
        raise _Failed("execute() accepted arguments its schema refuses")

    def invalid_args_are_refused(self) -> None:
        call = self._invalid_call()
        try:
            self.tool.normalize(target=call.target, args=call.args)
        except InvalidArguments:
            pass
        else:
            raise _Failed(f"normalize() accepted the unknown argument {UNKNOWN_ARGUMENT!r}")
        self._refused(call)

    def invalid_args_make_no_effect(self) -> None:
        before = self.effects()
        try:
            self._refused(self._invalid_call())
        finally:
            made = self.effects() - before
        _expect(made == 0, f"refused arguments made {made} effect(s)")

    # What the system does.

    def execute_returns_a_receipt(self) -> None:
        call = self.fresh_call()
        receipt = self.execute(call)
        _expect(isinstance(receipt, ToolReceipt), f"execute() answered {receipt!r}")
        try:
            ToolReceipt.from_dict(receipt.to_dict())
        except ValueError as error:
            raise _Failed(f"the receipt is malformed: {error}") from error
        _expect(
            receipt.intent_digest == call.intent_digest,
            f"the receipt carries {receipt.intent_digest}, not the call's {call.intent_digest}",
        )
        if self.tool.dedupes_by_key:
            _expect(
                receipt.idempotency_key == call.idempotency_key,
                f"the receipt names key {receipt.idempotency_key!r}, not the call's",
            )

    def _effects_of_one_execute(self) -> int:
        before = self.effects()
        self.execute(self.fresh_call())
        return self.effects() - before

    def write_makes_one_effect(self) -> None:
        self.needs(not self.read_only, "a read_only tool writes nothing")
        made = self._effects_of_one_execute()
        _expect(made == 1, f"one execute made {made} effects")

    def read_makes_no_effect(self) -> None:
        self.needs(self.read_only, f"it writes ({self.tool.effect_class})")
        made = self._effects_of_one_execute()
        _expect(made == 0, f"a read made {made} effect(s)")

    def query_finds_the_receipt(self) -> None:
        self.needs(self.tool.queryable_by_key, "it cannot be queried by key")
        call = self.fresh_call()
        receipt = self.execute(call)
        found = self.tool.query(
            call.idempotency_key, timeout=self.system.timeout, intent_digest=call.intent_digest
        )
        if found is None:
            raise _Failed("query(key) found nothing after execute")
        _expect(
            (found.receipt_id, found.intent_digest) == (receipt.receipt_id, receipt.intent_digest),
            f"query(key) found {found.receipt_id} for {found.intent_digest}, "
            f"not {receipt.receipt_id} for {receipt.intent_digest}",
        )

    def query_of_an_unused_key_is_none(self) -> None:
        self.needs(self.tool.queryable_by_key, "it cannot be queried by key")
        target, _ = self.fresh_input()
        found = self.tool.query(self.fresh_key(target), timeout=self.system.timeout)
        _expect(found is None, f"query(a key never sent) found {found!r}")

    def same_call_twice_same_receipt(self) -> None:
        self.needs(self.tool.dedupes_by_key, "it does not dedupe by key")
        call = self.fresh_call()
        first, second = self.execute(call), self.execute(call)
        _expect(
            _same(first, second),
            f"the same call answered {first.receipt_id}, then {second.receipt_id}",
        )

    def same_call_twice_one_effect(self) -> None:
        self.needs(self.tool.dedupes_by_key, "it does not dedupe by key")
        before = self.effects()
        call = self.fresh_call()
        self.execute(call)
        self.execute(call)
        made = self.effects() - before
        expected = 0 if self.read_only else 1
        _expect(made == expected, f"the same call twice made {made} effects, not {expected}")


def numbered_calls(
    target: str, args: dict[str, Any], *, first: int | None = None
) -> Callable[[], tuple[str, dict[str, Any]]]:
    """make_call for one given (target, args): each call has `{n}` in the target and in
    every string of args replaced by a number of its own, counting up from first (default:
    a random eight-digit start), so a system that takes one write per target gets a fresh
    one each time, in this run and, all but surely, in the runs before it."""
    start = random.randrange(10_000_000, 90_000_000) if first is None else first
    numbers = itertools.count(start)

    def make_call() -> tuple[str, dict[str, Any]]:
        number = str(next(numbers))
        return target.replace("{n}", number), _numbered(args, number)

    return make_call


def _numbered(value: Any, number: str) -> Any:
    if isinstance(value, str):
        return value.replace("{n}", number)
    if isinstance(value, dict):
        return {key: _numbered(item, number) for key, item in value.items()}
    if isinstance(value, list):
        return [_numbered(item, number) for item in value]
    return value


def frozen_call(tool: Tool, target: str, args: dict[str, Any], *, key: str) -> ToolCall:
    """The call a worker sends for the intent (target, args) under key: normalized and
    digested as a proposal freezes it. For an adapter's own tests beside the suite."""
    normal_target, normal_args = tool.normalize(target=target, args=args)
    return _frozen(tool, normal_target, normal_args, key=key)


def _frozen(tool: Tool, target: str, args: dict[str, Any], *, key: str) -> ToolCall:
    return ToolCall(
        tool=tool.name,
        target=target,
        args=args,
        idempotency_key=key,
        intent_digest=intent_digest(tool=tool.name, target=target, args=args),
    )
