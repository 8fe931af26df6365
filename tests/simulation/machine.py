"""A Hypothesis state machine over the real services, protocol, worker, sweep and
reconciliation, with an in-process external ledger (tests/simulation/ledger.py).

Workers are stepped through the worker's own functions (runs.execution.worker: the checks
before a send, protocol.attempt_begin, send with its lease fence and error handling,
record_response with the lease released in the same commit), one stage at a time, so the
machine can interleave "A claims", "A records its attempt", "A's call commits", "A crashes",
"the lease expires", "B recovers"; a crash at a stage stands for that fault point.
Whole jobs also run through the real `drain()`. Clocks are moved, never our code:
lease, approval, retry and probe times are rows compared with the database's now(), so
"time passes" is an UPDATE that moves those rows back.

Transactions really commit (django-rq enqueues on commit, so Redis sees what production
sees); each example starts from empty tables (TRUNCATE) and an empty Redis database.
After every step the invariants hold; teardown runs a final phase without faults and then
requires every intent to be terminal or in reconciliation.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import django_rq
from django.apps import apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from rq.job import Job

from control.foundation.canonical import intent_digest
from reconciliation.models import ReconciliationCase
from reconciliation.probes import probe_due_cases
from reconciliation.services import case_resolve, open_missing_cases
from runs.exceptions import GrantMismatch, LeaseLost, StaleState
from runs.execution import worker
from runs.execution.drain import drain
from runs.execution.faults import FAULT_POINTS
from runs.execution.sweep import sweep_once
from runs.models import TERMINAL_PHASES, Action, Approval, Attempt, OutboxMessage, Receipt, Run
from runs.record.events import LeaseToken
from runs.record.outbox import OPEN_CASE_JOB
from runs.record.verification import run_verify
from runs.selectors.connectors import tenant_tool
from runs.services import (
    action_propose,
    approval_decide,
    endings,
    lease_release,
    observation_record,
    protocol,
    recovery,
    run_cancel,
    run_start,
)
from runs.tools import errors as tool_errors
from runs.tools.registry import get_tool, register_tool, unregister_tool
from runs.tools.retry import RetryPolicy
from tests.factories import make_tenant, make_user
from tests.simulation.ledger import PROVIDER_FAULTS, SIM_TOOLS, WorkerCrash

# Every fault the issue names; the CI run proves each fired at least once.
COVERAGE = Counter()
REQUIRED_COVERAGE = (
    *(f"fault_point:{point}" for point in FAULT_POINTS),
    "lease_expiry",
    "pause_resume",
    "duplicate_delivery",
    "redis_lost",
    "tampered_row",
    "cancel_during_retry_wait",
    "tool_removed",
    *(f"provider:{fault}" for fault in PROVIDER_FAULTS),
)
# No waiting between tries: the machine moves the retry clock itself.
POLICY = RetryPolicy(base_delay=0.0, max_delay=0.0, max_attempts={"transient": 3})
OPEN = ("approved", "retry_wait", "needs_attention", "in_flight")
TERMINAL = {"succeeded", "satisfied", "failed", "rejected", "expired", "superseded", "cancelled"}
# The ends that tell the agent its write was not done.
REPORTED_NOT_DONE = ("failed", "rejected", "expired", "superseded")
WORKERS = ("A", "B")
TOOL_NAMES = tuple(tool_class.name for tool_class in SIM_TOOLS)
# Where a stepped worker stands, and the fault point a crash there stands for.
STAGE_POINTS = {
    "claimed": "before_send",
    "attempt_recorded": "attempt_recorded",
    "sent": "after_send_before_receipt",
    "recorded": "after_receipt",
}


@dataclass
class Stepping:
    """A simulated worker process's memory: what it claimed and how far it got."""

    action_pk: object
    lease: LeaseToken
    stage: str = "claimed"
    receipt: object = None
    attempt: object = None
    # The adapter the worker looked up when it claimed the action (a removal after that
    # does not take it out of the worker's hands, as in runs.execution.worker.execute).
    tool: object = None
    paused: bool = False
    # Further claims of the same batch, processed after this one (as drain() does).
    backlog: list = field(default_factory=list)


def empty_tables() -> None:
    """Every row of ours and every user gone, so an example starts from nothing."""
    user_model = get_user_model()
    models = [
        model
        for model in apps.get_models(include_auto_created=True)
        if model._meta.app_label in {"control", "runs", "reconciliation"}
        or model is user_model
        or getattr(model._meta, "auto_created", None) is user_model
    ]
    tables = ", ".join(connection.ops.quote_name(m._meta.db_table) for m in models)
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")


def move_clock(sql: str, params=()) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


class CountersignMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        empty_tables()
        self.tools = {cls.name: get_tool(cls.name) for cls in SIM_TOOLS}
        for tool in self.tools.values():
            tool.ledger.effects.clear()
            tool.ledger.clear_faults()
            tool.ledger.fired.clear()
        self.queue = django_rq.get_queue(settings.RQ_EXECUTION_QUEUE)
        self.queue.connection.flushdb()
        self.tenant = make_tenant()
        self.operator = make_user(self.tenant, "operator")
        self.reconciler = make_user(self.tenant, "reconciler")
        self.workers: dict[str, Stepping | None] = dict.fromkeys(WORKERS)
        # A restarted process has a new name (host:pid): count each worker's lives.
        self.lives = dict.fromkeys(WORKERS, 1)
        self.jobs_run = 0
        self.last_job: str | None = None
        self.proposed = 0
        # Intent digests an attacker wrote into the database (no key): never to be sent.
        self.forged: set[str] = set()
        self.tampered_runs: set = set()
        # Tools taken out of the registry by tool_removed_mid_run, until they come back.
        self.removed: set[str] = set()
        # Effects per key of a cancelled run's writes that were not in flight at the cancel.
        self.effects_at_cancel: dict[tuple[str, str], int] = {}

    # --- the agent and the operator --------------------------------------------------------

    # The fault this machine's examples start with (see focused_machine).
    focus: str = ""

    @initialize(plain_first=st.booleans())
    def two_approved_intents_then_the_focus(self, plain_first: bool) -> None:
        """One intent per tool; the first proposed is the one worker A meets the focus on."""
        for tool in sorted(TOOL_NAMES, reverse=plain_first):
            self.propose(tool=tool, same_run=False, approve=True)
        if self.focus:
            self._play_focus(self.focus)

    def _play_focus(self, focus: str) -> None:
        """Makes `focus` happen once, deterministically; random rules follow."""
        kind, _, what = focus.partition(":")
        if kind == "fault_point":
            self.worker_crashes_at(name="A", point=what)
        elif focus == "provider:query_transient":
            # Only a tool that can be queried by key meets a failing query: A works through
            # its batch until it holds the keyed intent.
            for _ in range(8):
                state = self.workers["A"]
                keyed = state and Action.objects.filter(pk=state.action_pk, tool="sim.keyed")
                if keyed and keyed.exists():
                    self.worker_meets_provider_fault(name="A", fault=what)
                    break
                self.worker_steps(name="A")
        elif kind == "provider":
            self.worker_meets_provider_fault(name="A", fault=what)
        elif focus == "lease_expiry":
            self.worker_crashes_at(name="A", point="attempt_recorded")
            self.lease_clock_passes_expiry()
            for _ in range(3):
                self.worker_steps(name="B")
        elif focus == "pause_resume":
            # B records its attempt and is stopped; its lease runs out; A takes the run over
            # and settles it; B wakes up and must be fenced out.
            self.worker_steps(name="B")
            self.worker_steps(name="B")
            self.worker_pauses_or_resumes(name="B")
            self.lease_clock_passes_expiry()
            for _ in range(4):
                self.worker_steps(name="A")
            self.worker_pauses_or_resumes(name="B")
        elif focus == "duplicate_delivery":
            self.job_delivered(twice=True)
        elif focus == "redis_lost":
            self.redis_lost()
            self.sweep()
            self.job_delivered(twice=False)
        elif focus == "tampered_row":
            self.tamper_with_an_approved_intent()
            for _ in range(4):
                self.worker_steps(name="A")
        elif focus == "cancel_during_retry_wait":
            # The keyed tool dedupes, so a 503 before anything happened means retry_wait.
            self.tools["sim.keyed"].ledger.plan("sim.keyed", "transient")
            for _ in range(8):
                if Action.objects.filter(tenant=self.tenant, status="retry_wait").exists():
                    break
                self.worker_steps(name="A")
            self.cancel_a_run(waiting_for_a_retry=True)
        elif focus == "tool_removed":
            self.worker_claims(name="A")
            self.tool_removed_mid_run(tool="sim.plain")
            for _ in range(4):
                self.worker_steps(name="A")
                self.worker_steps(name="B")

    @precondition(lambda self: self.proposed < 8)
    @rule(tool=st.sampled_from(TOOL_NAMES), same_run=st.booleans(), approve=st.booleans())
    def propose(self, tool: str, same_run: bool, approve: bool) -> None:
        if tool in self.removed:
            return  # the API refuses a tool the catalog no longer has (422)
        run = None
        if same_run:
            run = Run.objects.filter(tenant=self.tenant, phase=Run.Phase.RUNNING).first()
        if run is None:
            run = run_start(tenant=self.tenant, goal="simulated goal", created_by="agent")
        observation = observation_record(
            run=run,
            source="sim",
            ref=f"obs-{self.proposed}",
            content_hash="sha256:" + "a" * 64,
            summary="seen",
            actor="agent",
        )
        action, _ = action_propose(
            run=run,
            action_id=f"write-{self.proposed}",
            tool=tool,
            target=f"item-{self.proposed}",
            args={"n": self.proposed},
            contract_version="v1",
            observation=observation,
            proposed_by="agent",
        )
        self.proposed += 1
        if approve:
            approval_decide(
                action=action,
                approver=self.operator,
                decision="approve",
                seen_digest=action.intent_digest,
                seen_state_version=action.base_version,
            )

    def _waiting(self) -> Action | None:
        return (
            Action.objects.filter(tenant=self.tenant, status="waiting_approval")
            .select_related("run")
            .first()
        )

    @rule(decision=st.sampled_from(["approve", "reject", "let_expire"]))
    def decide(self, decision: str) -> None:
        if decision == "let_expire":
            self.approval_clock_passes_expiry()
            return
        action = self._waiting()
        if action is None:
            return
        try:
            approval_decide(
                action=action,
                approver=self.operator,
                decision=decision,
                seen_digest=action.intent_digest,
                seen_state_version=action.base_version,
            )
        except GrantMismatch:
            COVERAGE["decision_refused"] += 1  # the page tells the operator it expired

    def approval_clock_passes_expiry(self) -> None:
        move_clock(
            "UPDATE runs_action SET expires_at = now() - interval '1 second' "
            "WHERE tenant_id = %s AND status = 'waiting_approval'",
            [self.tenant.pk],
        )

    # --- faults ----------------------------------------------------------------------------

    @rule(name=st.sampled_from([*WORKERS, "job"]), fault=st.sampled_from(PROVIDER_FAULTS))
    def worker_meets_provider_fault(self, name: str, fault: str) -> None:
        """The provider answers this worker's next call (or query) with `fault`; "job" is a
        drain job of the real worker code."""
        # A failing query matters after an unknown outcome: the call's answer is lost too.
        faults = ["commit_then_drop", fault] if fault == "query_transient" else [fault]
        if name == "job":
            for tool in TOOL_NAMES:
                for planned in faults:
                    self.tools[tool].ledger.plan(tool, planned)
            self._run_job("runs.jobs.execute_run")
            return
        if self.workers[name] is None:
            self.worker_claims(name)
        state = self.workers[name]
        if state is None or state.paused:
            return
        tool = Action.objects.values_list("tool", flat=True).get(pk=state.action_pk)
        for planned in faults:
            self.tools[tool].ledger.plan(tool, planned)
        for _ in range(3):
            if self.workers[name] is None:
                return
            self._step(name, self.workers[name])

    @rule(tool=st.sampled_from(TOOL_NAMES))
    def tool_removed_mid_run(self, tool: str) -> None:
        """An operator removes a tool from the catalog while its intents are under way."""
        if tool not in self.removed:
            unregister_tool(self.tools[tool])
            self.removed.add(tool)
            COVERAGE["tool_removed"] += 1

    @rule()
    def removed_tools_come_back(self) -> None:
        for tool in self.removed:
            register_tool(self.tools[tool])
        self.removed.clear()

    @rule()
    def tamper_with_an_approved_intent(self) -> None:
        """Someone with write access to the database but no checkpoint key raises an approved
        intent's arguments and recomputes its digest and its grants' digests."""
        action = Action.objects.filter(
            tenant=self.tenant, status__in=["approved", "retry_wait"]
        ).first()
        if action is None:
            return
        args = {"n": 999_999}
        forged = intent_digest(tool=action.tool, target=action.target, args=args)
        Action.objects.filter(pk=action.pk).update(args=args, intent_digest=forged)
        Approval.objects.filter(action=action).update(intent_digest=forged)
        self.forged.add(forged)
        self.tampered_runs.add(action.run_id)
        COVERAGE["tampered_row"] += 1

    @rule(waiting_for_a_retry=st.booleans())
    def cancel_a_run(self, waiting_for_a_retry: bool) -> None:
        """The agent (or an operator) cancels a run, possibly while a write waits for a retry."""
        runs = Run.objects.filter(tenant=self.tenant).exclude(phase__in=TERMINAL_PHASES)
        if waiting_for_a_retry:
            runs = runs.filter(actions__status="retry_wait")
        run = runs.first()
        if run is None:
            return
        in_flight = set(run.actions.filter(status="in_flight").values_list("pk", flat=True))
        run_cancel(run=run, reason="the agent changed its mind", actor="agent")
        for action in run.actions.exclude(pk__in=in_flight):
            ledger = self.tools[action.tool].ledger
            self.effects_at_cancel[action.tool, action.idempotency_key] = len(
                ledger.applied(action.idempotency_key)
            )
        if waiting_for_a_retry:
            COVERAGE["cancel_during_retry_wait"] += 1

    @rule(clock=st.sampled_from(["leases", "retries_and_probes"]))
    def clock_passes(self, clock: str) -> None:
        if clock == "leases":
            self.lease_clock_passes_expiry()
        else:
            self.retry_and_probe_clocks_pass()

    def lease_clock_passes_expiry(self) -> None:
        move_clock(
            "UPDATE runs_lease SET expires_at = now() - interval '1 second' "
            "WHERE run_id IN (SELECT id FROM runs_run WHERE tenant_id = %s) "
            "AND expires_at > now()",
            [self.tenant.pk],
        )
        COVERAGE["lease_expiry"] += 1

    def retry_and_probe_clocks_pass(self) -> None:
        move_clock(
            "UPDATE runs_action SET next_attempt_at = now() - interval '1 second' "
            "WHERE tenant_id = %s AND status IN ('retry_wait', 'in_flight')",
            [self.tenant.pk],
        )
        move_clock(
            "UPDATE reconciliation_reconciliationcase SET next_probe_at = now() "
            "WHERE tenant_id = %s AND status = 'probing'",
            [self.tenant.pk],
        )

    @rule()
    def redis_lost(self) -> None:
        self.queue.connection.flushdb()
        COVERAGE["redis_lost"] += 1

    # --- stepped workers -------------------------------------------------------------------

    def worker_claims(self, name: str) -> None:
        if self.workers[name] is not None:
            return
        claims = worker.claim_ready(worker=f"{name}-{self.lives[name]}", batch=2)
        if claims:
            (action_pk, lease), *backlog = claims
            self.workers[name] = Stepping(action_pk, lease, backlog=backlog)

    @rule(name=st.sampled_from(WORKERS))
    def worker_steps(self, name: str) -> None:
        """An idle worker claims the next due action; a busy one takes its next step."""
        state = self.workers[name]
        if state is None:
            self.worker_claims(name)
        elif not state.paused:
            self._step(name, state)

    @rule(name=st.sampled_from(WORKERS), point=st.sampled_from(FAULT_POINTS))
    def worker_crashes_at(self, name: str, point: str) -> None:
        """Claims if idle, steps until the worker stands at `point`, then kills it there."""
        if self.workers[name] is None:
            self.worker_claims(name)
        for _ in range(5):
            state = self.workers[name]
            if state is None or state.paused:
                return
            if STAGE_POINTS.get(state.stage) == point:
                COVERAGE[f"fault_point:{point}"] += 1
                self._die(name)  # SIGKILL: its memory is gone, its lease stays
                return
            self._step(name, state)

    @rule(name=st.sampled_from(WORKERS))
    def worker_pauses_or_resumes(self, name: str) -> None:
        """SIGSTOP, or SIGCONT for a stopped worker, which then takes its next step."""
        state = self.workers[name]
        if state is not None and not state.paused:
            state.paused = True
        elif state is not None:
            state.paused = False
            COVERAGE["pause_resume"] += 1
            self._step(name, state)

    def _die(self, name: str) -> None:
        self.workers[name] = None
        self.lives[name] += 1

    def _step(self, name: str, state: Stepping) -> None:
        """One step of runs.execution.worker.process_action/execute: same calls, same order."""
        try:
            self._advance(state)
        except LeaseLost:
            COVERAGE["fenced"] += 1
            self.workers[name] = None
        except (IntegrityError, StaleState):
            # The job fails (RQ records it); the state it tried to write was already written.
            COVERAGE["job_failed_on_guard"] += 1
            self.workers[name] = None
        except WorkerCrash:
            self._die(name)
        else:
            if state.stage == "done" and state.backlog:
                (action_pk, lease), *backlog = state.backlog
                self.workers[name] = Stepping(action_pk, lease, backlog=backlog)
            elif state.stage == "done":
                self.workers[name] = None

    def _advance(self, state: Stepping) -> None:
        """The worker's own functions, one stage at a time: the machine only chooses when
        the next one runs (or that the worker dies before it). Where process_action
        releases the lease after a stage, so does this."""
        name, lease = state.lease.owner, state.lease
        action = Action.objects.select_related("run", "run__tenant").get(pk=state.action_pk)
        if state.stage == "claimed":
            state.stage = "attempt_recorded" if self._begin(state, action) else "done"
        elif state.stage == "attempt_recorded":
            # The lease fence (a read), the call with the intent's key, what an error means.
            state.receipt = worker.send(
                action, state.attempt, state.tool, lease=lease, worker=name, policy=POLICY
            )
            if state.receipt is None:  # a failure, a retry later, or settled by key
                lease_release(lease=lease)
                state.stage = "done"
                return
            state.stage = "sent"
        elif state.stage == "sent":
            # The receipt, with the lease released in the same commit.
            worker.record_response(action, state.attempt, state.receipt, lease=lease, worker=name)
            state.stage = "recorded"
        elif state.stage == "recorded":
            state.stage = "done"

    def _begin(self, state: Stepping, action: Action) -> bool:
        """process_action and execute up to the attempt: verify the checkpoint, look the
        tool up for the tenant, settle an action left in flight, refuse what was not signed,
        read before a first send, begin the attempt. False when the lease went back."""
        name, lease = state.lease.owner, state.lease
        verified = worker._verified_state(action.run, lease, name)
        if verified is not None:
            try:
                state.tool = tenant_tool(
                    tenant=action.run.tenant,
                    name=action.tool,
                    contract_version=action.contract_version,
                )
            except tool_errors.UnsupportedTool as error:
                recovery.action_unsupported(
                    action_pk=action.pk,
                    lease=lease,
                    detail=str(error),
                    worker=name,
                    error_class=error.error_class,
                )
            else:
                if action.status == Action.Status.IN_FLIGHT:
                    worker.settle_unknown(action=action, lease=lease, worker=name, policy=POLICY)
                elif worker._executes_what_was_signed(verified, action, name):
                    first = action.attempt_count == 0 and state.tool.can_be_satisfied()
                    if not (
                        first and worker.already_satisfied(action, state.tool, lease, name, POLICY)
                    ):
                        state.attempt = protocol.attempt_begin(
                            action_pk=action.pk, lease=lease, worker=name
                        )
        if state.attempt is None:
            lease_release(lease=lease)
            return False
        return True

    # --- whole jobs: the real drain, RQ delivery, the sweep, reconciliation ---------------

    @rule()
    def sweep(self) -> None:
        sweep_once()
        open_missing_cases()
        self._probe()

    def _probe(self) -> None:
        probe_due_cases()

    def deliver_job(self) -> None:
        """A worker takes the next job from Redis and runs it (the real drain)."""
        job_id = self.queue.connection.lpop(self.queue.key)
        if job_id is None:
            return
        job = Job.fetch(job_id.decode(), connection=self.queue.connection)
        self.last_job = job.func_name
        job.delete()  # as RQ does after a job that succeeded (result_ttl=0)
        self._run_job(self.last_job)

    @rule(twice=st.booleans())
    def job_delivered(self, twice: bool) -> None:
        """A worker runs the next job from Redis (the sweep queues one if Redis holds none);
        `twice`: the same job is then delivered again."""
        if self.queue.count == 0:
            sweep_once()
        self.deliver_job()
        if twice and self.last_job is not None:
            COVERAGE["duplicate_delivery"] += 1
            self._run_job(self.last_job)

    def _run_job(self, func_name: str) -> None:
        self.jobs_run += 1
        name = f"job-{self.jobs_run}"
        try:
            if func_name == "runs.jobs.execute_run":
                drain(worker=name, limit=20, policy=POLICY)
            else:
                open_missing_cases()
                self._probe()
        except WorkerCrash:
            pass  # the job's process died mid-drain; its leases run out like any other

    @rule()
    def reconciler_resolves_by_the_truth(self) -> None:
        case = (
            ReconciliationCase.objects.filter(tenant=self.tenant, status="open")
            .select_related("action", "tenant")
            .first()
        )
        if case is not None:
            self._resolve(case)

    def _resolve(self, case: ReconciliationCase) -> None:
        """A reconciler who checked the provider: applied exactly when the ledger says so."""
        action = case.action
        effects = self.tools[action.tool].ledger.applied(action.idempotency_key)
        if effects:
            case_resolve(
                case=case,
                user=self.reconciler,
                resolution="applied",
                note="the provider's ledger shows it",
                evidence={
                    "receipt_id": effects[0].receipt_id,
                    "intent_digest": action.intent_digest,
                },
            )
        elif action.tool in self.removed:
            # Nothing can be sent with a tool that is gone: the write stays undone.
            case_resolve(case=case, user=self.reconciler, resolution="abandon", note="tool retired")
        else:
            case_resolve(
                case=case,
                user=self.reconciler,
                resolution="not_applied",
                note="the provider never saw it",
                confirm_resend=True,
            )

    # --- invariants ------------------------------------------------------------------------

    @invariant()
    def at_most_one_effect_per_intent(self) -> None:
        for tool in self.tools.values():
            for key, effects in tool.ledger.effects.items():
                assert len(effects) <= 1, f"{len(effects)} effects under {key}"

    @invariant()
    def a_write_reported_as_not_done_left_no_effect(self) -> None:
        """Failed, expired, superseded or rejected says the system holds nothing under the
        intent's key: an effect there is a write that happened while the run says it did not
        (what a send marked failed after an answer that proved nothing would leave)."""
        ended = Action.objects.filter(tenant=self.tenant, status__in=REPORTED_NOT_DONE)
        for action in ended.only("tool", "idempotency_key", "action_id", "status"):
            applied = self.tools[action.tool].ledger.applied(action.idempotency_key)
            assert applied == [], (
                f"{action.action_id} is {action.status}, yet {action.tool} holds "
                f"{len(applied)} effect(s) under its key"
            )

    @invariant()
    def no_forged_intent_is_ever_sent(self) -> None:
        for tool in self.tools.values():
            for effects in tool.ledger.effects.values():
                assert not {e.intent_digest for e in effects} & self.forged, "a forged send"

    @invariant()
    def nothing_of_a_cancelled_run_is_sent_after_the_cancel(self) -> None:
        for (tool, key), before in self.effects_at_cancel.items():
            sent = len(self.tools[tool].ledger.applied(key))
            assert sent == before, f"{key} sent after its run stopped"

    @invariant()
    def receipts_match_their_intents_and_the_ledger(self) -> None:
        for receipt in Receipt.objects.filter(tenant=self.tenant).select_related("action"):
            action = receipt.action
            assert receipt.intent_digest == action.intent_digest
            if receipt.source in (Receipt.Source.RESPONSE, Receipt.Source.QUERY):
                effects = self.tools[action.tool].ledger.applied(action.idempotency_key)
                assert [e.receipt_id for e in effects] == [receipt.receipt_id]

    @invariant()
    def runs_are_consistent_with_their_pending_actions(self) -> None:
        expected_phase = {
            "waiting_approval": {"waiting_approval"},
            "approved": {"executing"},
            "retry_wait": {"executing"},
            "needs_attention": {"executing"},
            # A stopped run keeps its writes in doubt for reconciliation.
            "in_flight": {"executing", *TERMINAL_PHASES},
            "uncertain": {"waiting_reconciliation", *TERMINAL_PHASES},
        }
        for run in Run.objects.filter(tenant=self.tenant):
            for action in run.actions.all():
                allowed = expected_phase.get(action.status)
                if allowed is not None:
                    assert run.phase in allowed, f"{action.status} action in a {run.phase} run"
            # Continuous seq, intact chain, replay == stored state, checkpoint verifies; a run
            # whose rows were forged shows exactly that until a worker stops it.
            problems = run_verify(run)
            if run.pk in self.tampered_runs and run.phase not in TERMINAL_PHASES:
                assert any(problem.startswith("pending intent:") for problem in problems)
            else:
                assert problems == []

    @invariant()
    def every_unknown_outcome_is_proven_or_in_reconciliation(self) -> None:
        for action in Action.objects.filter(tenant=self.tenant, status="uncertain"):
            has_case = action.cases.exclude(status="resolved").exists()
            case_coming = OutboxMessage.objects.filter(action=action, job=OPEN_CASE_JOB).exists()
            assert has_case or case_coming, f"{action.action_id} is uncertain and unowned"
        for attempt in Attempt.objects.filter(action__tenant=self.tenant, status="uncertain"):
            assert attempt.action.status in {"in_flight", "uncertain", *TERMINAL}

    # --- the final phase -------------------------------------------------------------------

    def teardown(self) -> None:
        self._settle_everything()

    def _settle_everything(self) -> None:
        """No more faults: every process dies or finishes, clocks pass, and the sweep, the
        workers and a reconciler bring every intent to rest."""
        self.removed_tools_come_back()
        for tool in self.tools.values():
            tool.ledger.clear_faults()
        self.workers = dict.fromkeys(WORKERS)
        for _ in range(12):
            self.approval_clock_passes_expiry()
            move_clock(
                "UPDATE runs_lease SET expires_at = now() - interval '1 second' "
                "WHERE run_id IN (SELECT id FROM runs_run WHERE tenant_id = %s)",
                [self.tenant.pk],
            )
            self.retry_and_probe_clocks_pass()
            self.sweep()
            drain(worker=f"final-{self.jobs_run}", limit=50, policy=POLICY)
            for case in ReconciliationCase.objects.filter(
                tenant=self.tenant, status="open"
            ).select_related("action", "tenant"):
                self._resolve(case)
            # The outage is over: an operator sends what outlasted its retry window again.
            for action in Action.objects.filter(tenant=self.tenant, status="needs_attention"):
                endings.action_retry_now(action_pk=action.pk, user=self.operator)
            busy = (
                Action.objects.filter(
                    tenant=self.tenant, status__in=[*OPEN, "waiting_approval"]
                ).exists()
                or ReconciliationCase.objects.filter(
                    tenant=self.tenant, status__in=["probing", "open"]
                ).exists()
                or Action.objects.filter(tenant=self.tenant, status="uncertain")
                .exclude(cases__status__in=["probing", "open", "awaiting_second"])
                .exists()
            )
            if not busy:
                break
        self.at_most_one_effect_per_intent()
        self.receipts_match_their_intents_and_the_ledger()
        self.runs_are_consistent_with_their_pending_actions()
        for action in Action.objects.filter(tenant=self.tenant):
            in_reconciliation = (
                action.status == "uncertain" and action.cases.exclude(status="resolved").exists()
            )
            assert action.status in TERMINAL or in_reconciliation, (
                f"{action.action_id} ended {action.status}"
            )
        for tool in self.tools.values():
            for fault, count in tool.ledger.fired.items():
                COVERAGE[f"provider:{fault}"] += count


def focused_machine(focus: str) -> type[CountersignMachine]:
    """A machine whose every example starts by making `focus` happen."""
    name = "Machine_" + "".join(part.title() for part in focus.replace(":", "_").split("_"))
    return type(name, (CountersignMachine,), {"focus": focus})
