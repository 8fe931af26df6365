"""A Hypothesis state machine over the real services, protocol, worker, sweep and
reconciliation, with an in-process external ledger (tests/simulation/ledger.py).

Workers are simulated step by step through the same functions, in the same order, as
runs.worker.process_action calls them, so the machine can interleave "A claims", "A
records its attempt", "A's call commits", "A crashes", "the lease expires", "B recovers".
Whole jobs also run through the real `drain()`. Clocks are moved, never our code:
lease, approval, retry and probe times are rows compared with the database's now(), so
"time passes" is an UPDATE that moves those rows back.

Each example runs inside a savepoint that teardown rolls back, so examples never see
each other's rows. After every step the invariants hold; teardown runs a final phase
without faults and then requires every intent to be terminal or in reconciliation.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import django_rq
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from rq.job import Job

from reconciliation.models import ReconciliationCase
from reconciliation.services import case_resolve, open_missing_cases, probe_due_cases
from runs import protocol, worker
from runs.events import LeaseToken
from runs.exceptions import GrantMismatch, LeaseLost, StaleState
from runs.faults import FAULT_POINTS
from runs.models import Action, Attempt, OutboxMessage, Receipt, Run
from runs.services import (
    action_propose,
    approval_decide,
    lease_release,
    lease_renew,
    observation_record,
    run_start,
)
from runs.sweep import sweep_once
from runs.tools import errors as tool_errors
from runs.tools.base import ToolCall
from runs.tools.registry import get_tool
from runs.tools.retry import RetryPolicy
from runs.verification import run_verify
from runs.worker import drain
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
    *(f"provider:{fault}" for fault in PROVIDER_FAULTS),
)
# No waiting between tries: the machine moves the retry clock itself.
POLICY = RetryPolicy(base_delay=0.0, max_delay=0.0, max_attempts={"transient": 3})
OPEN = ("approved", "retry_wait", "in_flight")
TERMINAL = {"succeeded", "satisfied", "failed", "rejected", "expired", "superseded", "cancelled"}
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
    paused: bool = False


def move_clock(sql: str, params=()) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


class CountersignMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._savepoint = transaction.atomic()
        self._savepoint.__enter__()
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

    # --- the agent and the operator --------------------------------------------------------

    @initialize()
    def two_approved_intents(self) -> None:
        for tool in TOOL_NAMES:
            self.propose(tool=tool, same_run=False, approve=True)

    @precondition(lambda self: self.proposed < 8)
    @rule(tool=st.sampled_from(TOOL_NAMES), same_run=st.booleans(), approve=st.booleans())
    def propose(self, tool: str, same_run: bool, approve: bool) -> None:
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

    @rule(reject=st.booleans())
    def decide(self, reject: bool) -> None:
        action = self._waiting()
        if action is None:
            return
        try:
            approval_decide(
                action=action,
                approver=self.operator,
                decision="reject" if reject else "approve",
                seen_digest=action.intent_digest,
                seen_state_version=action.base_version,
            )
        except GrantMismatch:
            COVERAGE["decision_refused"] += 1  # the page tells the operator it expired

    @rule()
    def approval_clock_passes_expiry(self) -> None:
        move_clock(
            "UPDATE runs_action SET expires_at = now() - interval '1 second' "
            "WHERE tenant_id = %s AND status = 'waiting_approval'",
            [self.tenant.pk],
        )

    # --- faults ----------------------------------------------------------------------------

    @rule(
        tool=st.sampled_from([cls.name for cls in SIM_TOOLS]),
        fault=st.sampled_from(PROVIDER_FAULTS),
    )
    def plan_provider_fault(self, tool: str, fault: str) -> None:
        self.tools[tool].ledger.plan(tool, fault)

    @rule()
    def lease_clock_passes_expiry(self) -> None:
        move_clock(
            "UPDATE runs_lease SET expires_at = now() - interval '1 second' "
            "WHERE run_id IN (SELECT id FROM runs_run WHERE tenant_id = %s) "
            "AND expires_at > now()",
            [self.tenant.pk],
        )
        COVERAGE["lease_expiry"] += 1

    @rule()
    def retry_and_probe_clocks_pass(self) -> None:
        move_clock(
            "UPDATE runs_action SET next_attempt_at = now() - interval '1 second' "
            "WHERE tenant_id = %s AND status = 'retry_wait'",
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

    @rule(name=st.sampled_from(WORKERS))
    def worker_claims(self, name: str) -> None:
        if self.workers[name] is not None:
            return
        claims = worker.claim_ready(worker=f"{name}-{self.lives[name]}", batch=1)
        if claims:
            action_pk, lease = claims[0]
            self.workers[name] = Stepping(action_pk, lease)

    @rule(name=st.sampled_from(WORKERS))
    def worker_steps(self, name: str) -> None:
        state = self.workers[name]
        if state is None or state.paused:
            return
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
    def worker_pauses(self, name: str) -> None:
        if self.workers[name] is not None:
            self.workers[name].paused = True

    @rule(name=st.sampled_from(WORKERS))
    def worker_resumes(self, name: str) -> None:
        state = self.workers[name]
        if state is not None and state.paused:
            state.paused = False
            COVERAGE["pause_resume"] += 1
            self._step(name, state)

    def _die(self, name: str) -> None:
        self.workers[name] = None
        self.lives[name] += 1

    def _step(self, name: str, state: Stepping) -> None:
        """One step of runs.worker.process_action/execute, the same calls in the same order."""
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
            if state.stage == "done":
                self.workers[name] = None

    def _advance(self, state: Stepping) -> None:
        name, lease = state.lease.owner, state.lease
        action = Action.objects.select_related("run").get(pk=state.action_pk)
        if state.stage == "claimed":
            if not worker._checkpoint_ok(action.run, lease, name):
                state.stage = "done"
                return
            if action.status == Action.Status.IN_FLIGHT:
                worker.settle_unknown(action=action, lease=lease, worker=name, policy=POLICY)
                lease_release(lease=lease)
                state.stage = "done"
                return
            tool = get_tool(action.tool, action.contract_version)
            if action.attempt_count == 0 and worker._already_satisfied(
                action, tool, lease, name, POLICY
            ):
                lease_release(lease=lease)
                state.stage = "done"
                return
            state.attempt = protocol.attempt_begin(action_pk=action.pk, lease=lease, worker=name)
            if state.attempt is None:
                lease_release(lease=lease)
                state.stage = "done"
                return
            state.stage = "attempt_recorded"
        elif state.stage == "attempt_recorded":
            lease_renew(lease=lease)
            tool = get_tool(action.tool, action.contract_version)
            call = ToolCall(
                tool=action.tool,
                target=action.target,
                args=action.args,
                idempotency_key=action.idempotency_key,
                intent_digest=action.intent_digest,
            )
            try:
                state.receipt = tool.execute(call, timeout=POLICY.call_timeout)
            except tool_errors.ResultUncertain as error:
                protocol.attempt_unknown(
                    attempt_pk=state.attempt.pk,
                    lease=lease,
                    error_class=error.error_class,
                    detail=str(error),
                    worker=name,
                )
                worker.settle_unknown(action=action, lease=lease, worker=name, policy=POLICY)
                lease_release(lease=lease)
                state.stage = "done"
                return
            except tool_errors.ToolError as error:
                worker._record_failure(
                    state.attempt, error, lease=lease, worker=name, policy=POLICY
                )
                lease_release(lease=lease)
                state.stage = "done"
                return
            state.stage = "sent"
        elif state.stage == "sent":
            protocol.receipt_record(
                action_pk=action.pk,
                lease=lease,
                receipt=state.receipt,
                source=Receipt.Source.RESPONSE,
                worker=name,
                attempt_pk=state.attempt.pk,
            )
            state.stage = "recorded"
        elif state.stage == "recorded":
            lease_release(lease=lease)
            state.stage = "done"

    # --- whole jobs: the real drain, RQ delivery, the sweep, reconciliation ---------------

    @rule()
    def sweep(self) -> None:
        sweep_once()
        open_missing_cases()
        self._probe()

    def _probe(self) -> None:
        probe_due_cases()

    @rule()
    def deliver_job(self) -> None:
        """A worker takes the next job from Redis and runs it (the real drain)."""
        job_id = self.queue.connection.lpop(self.queue.key)
        if job_id is None:
            return
        job = Job.fetch(job_id.decode(), connection=self.queue.connection)
        self.last_job = job.func_name
        job.delete()  # as RQ does after a job that succeeded (result_ttl=0)
        self._run_job(self.last_job)

    @precondition(lambda self: self.last_job is not None)
    @rule()
    def deliver_job_again(self) -> None:
        """Redis (or a retrying client) delivers the same job a second time."""
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
            "in_flight": {"executing"},
            "uncertain": {"waiting_reconciliation"},
        }
        for run in Run.objects.filter(tenant=self.tenant):
            for action in run.actions.all():
                allowed = expected_phase.get(action.status)
                if allowed is not None:
                    assert run.phase in allowed, f"{action.status} action in a {run.phase} run"
            # Continuous seq, intact chain, replay == stored state, checkpoint verifies.
            assert run_verify(run) == []

    @invariant()
    def every_unknown_outcome_is_proven_or_in_reconciliation(self) -> None:
        for action in Action.objects.filter(tenant=self.tenant, status="uncertain"):
            has_case = action.cases.exclude(status="resolved").exists()
            case_coming = OutboxMessage.objects.filter(
                action=action, job=protocol.OPEN_CASE_JOB
            ).exists()
            assert has_case or case_coming, f"{action.action_id} is uncertain and unowned"
        for attempt in Attempt.objects.filter(action__tenant=self.tenant, status="uncertain"):
            assert attempt.action.status in {"in_flight", "uncertain", *TERMINAL}

    # --- the final phase -------------------------------------------------------------------

    def teardown(self) -> None:
        try:
            self._settle_everything()
        finally:
            transaction.set_rollback(True)
            self._savepoint.__exit__(None, None, None)

    def _settle_everything(self) -> None:
        """No more faults: every process dies or finishes, clocks pass, and the sweep, the
        workers and a reconciler bring every intent to rest."""
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
            busy = (
                Action.objects.filter(
                    tenant=self.tenant, status__in=[*OPEN, "waiting_approval"]
                ).exists()
                or ReconciliationCase.objects.filter(
                    tenant=self.tenant, status__in=["probing", "open"]
                ).exists()
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
