"""Intents and what follows them: tool policies and frozen tool definitions, actions,
approvals, attempts, receipts, and the outbox that relays work after each commit."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from control.models import SignedRow, Tenant
from runs.models.runs import Observation, Run


class Risk(models.IntegerChoices):
    """How much is at stake in one write, as the tenant rates the tool: ordered, so the inbox
    sorts by it (runs.selectors.core.risk_of says the default)."""

    LOW = 1, "low"
    HIGH = 2, "high"
    IRREVERSIBLE = 3, "irreversible"


class ToolPolicy(SignedRow):
    """A tenant's approval rules for one tool; absent rows fall back to the tool's defaults.
    Signed (runs.record.signed_rows): a row that does not verify is read as the strictest
    policy, never as "no approval needed"."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="tool_policies")
    tool = models.CharField(max_length=64)
    needs_approval = models.BooleanField(default=True)
    four_eyes = models.BooleanField(default=False)
    required_approvals = models.PositiveSmallIntegerField(default=1)
    approval_seconds = models.PositiveIntegerField(default=24 * 3600)
    # Off: every intent of this tool needs a person, whatever rule anyone writes.
    standing_grants_allowed = models.BooleanField(default=True)
    # Escalation: a request still waiting this long after its proposal is told, once, to
    # these addresses (runs.services.outreach). Read when the sweep looks, not frozen into
    # the intent: it changes who hears about a request, never what may be approved.
    escalation_seconds = models.PositiveIntegerField(null=True, blank=True)
    escalation_contacts = models.JSONField(default=list, blank=True)
    # A link from the "approval requested" mail may decide without a logged-in session:
    # meant for low-risk tools only (runs.pages.decision_links).
    link_only_decisions = models.BooleanField(default=False)
    # The tenant's rating of the tool; None: what the tool's nature says (risk_of).
    risk = models.PositiveSmallIntegerField(choices=Risk.choices, null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "tool"], name="tool_policy_unique_tool"),
            models.CheckConstraint(
                condition=Q(escalation_seconds__isnull=True) | Q(escalation_seconds__gte=1),
                name="tool_policy_escalation_positive",
            ),
            models.CheckConstraint(
                condition=Q(required_approvals__gte=1), name="tool_policy_approvals_positive"
            ),
            models.CheckConstraint(
                condition=Q(approval_seconds__gte=1), name="tool_policy_expiry_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool} policy for {self.tenant}"


class ToolDefinition(models.Model):
    """A tool's meaning at one contract version, frozen the first time an intent used it:
    the same (tool, version) must never mean something else (runs.services.definitions)."""

    tool = models.CharField(max_length=64)
    contract_version = models.CharField(max_length=32)
    digest = models.CharField(max_length=71)
    definition = models.JSONField()
    first_used_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tool", "contract_version"], name="tool_definition_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tool} {self.contract_version} ({self.digest})"


# An intent not settled yet: waiting, about to be sent or out, or held for a person. The
# constraints and indexes below name them; OPEN_ACTION_STATUSES is the same set.
_OPEN = ["waiting_approval", "approved", "in_flight", "retry_wait", "needs_attention", "uncertain"]


class Action(models.Model):
    """A frozen intent. Tool, target, args, key and digest never change after insert;
    "edit and approve" creates a new Action under a derived logical id instead."""

    class Status(models.TextChoices):
        WAITING_APPROVAL = "waiting_approval"
        APPROVED = "approved"
        IN_FLIGHT = "in_flight"
        RETRY_WAIT = "retry_wait"
        # Transient failures outlasted the tool's retry window: an operator retries it now
        # (same key) or gives up; the run keeps going meanwhile, and no new key is minted.
        NEEDS_ATTENTION = "needs_attention"
        UNCERTAIN = "uncertain"
        SUCCEEDED = "succeeded"
        SATISFIED = "satisfied"
        FAILED = "failed"
        REJECTED = "rejected"
        EXPIRED = "expired"
        SUPERSEDED = "superseded"
        CANCELLED = "cancelled"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="actions")
    action_id = models.CharField(max_length=200)
    tool = models.CharField(max_length=64)
    target = models.CharField(max_length=500)
    args = models.JSONField(default=dict, blank=True)
    contract_version = models.CharField(max_length=32)
    idempotency_key = models.CharField(max_length=900, unique=True)
    intent_digest = models.CharField(max_length=71)
    observation = models.ForeignKey(
        Observation, on_delete=models.PROTECT, null=True, blank=True, related_name="actions"
    )
    supersedes = models.OneToOneField(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="superseded_by"
    )
    proposed_by = models.CharField(max_length=150)
    proposed_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True
    )
    needs_approval = models.BooleanField()
    four_eyes = models.BooleanField(default=False)
    required_approvals = models.PositiveSmallIntegerField(default=1)
    # The tool's risk under the policy it was proposed under, frozen with it.
    risk = models.PositiveSmallIntegerField(choices=Risk.choices, default=Risk.HIGH)
    status = models.CharField(max_length=32, choices=Status.choices)
    base_version = models.PositiveIntegerField()
    base_event_seq = models.PositiveIntegerField()
    expires_at = models.DateTimeField(null=True, blank=True)
    attempt_count = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    error_class = models.CharField(max_length=64, blank=True)
    last_error = models.TextField(blank=True)
    decision_reason = models.TextField(blank=True)
    # The plan this intent was proposed in, and its place there (runs.services.plans).
    plan = models.ForeignKey(
        "runs.Plan", on_delete=models.PROTECT, null=True, blank=True, related_name="items"
    )
    position = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "action_id"], name="action_unique_logical_id"),
            # A run holds at most one open intent of its own, or the open items of one plan
            # (runs.services.plans): either way its writes are ordered.
            models.UniqueConstraint(
                fields=["run"],
                condition=Q(status__in=_OPEN, plan__isnull=True),
                name="action_one_open_per_run",
            ),
            # Whatever a run holds, one write at a time is sent or in doubt.
            models.UniqueConstraint(
                fields=["run"],
                condition=Q(status__in=["in_flight", "needs_attention", "uncertain"]),
                name="action_one_in_flight_per_run",
            ),
            models.UniqueConstraint(
                fields=["plan", "position"], name="action_unique_plan_position"
            ),
            models.CheckConstraint(
                condition=Q(intent_digest__startswith="sha256:"), name="action_digest_format"
            ),
            models.CheckConstraint(
                condition=Q(required_approvals__gte=1), name="action_approvals_positive"
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status__in=["approved", "retry_wait"]),
                name="action_ready_queue",
            ),
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status="in_flight"),
                name="action_in_flight",
            ),
            models.Index(
                fields=["tenant", "expires_at"],
                condition=Q(status="waiting_approval"),
                name="action_approval_queue",
            ),
            # The inbox's proposer list and its count of waiting requests read this index
            # alone (index-only scans), never the tenant's decided history; `plan` is here
            # for the count, which leaves plans' items out.
            models.Index(
                fields=["tenant", "proposed_by", "plan"],
                condition=Q(status="waiting_approval"),
                name="action_waiting_proposer",
            ),
            # A checkpoint's open intents (the next one, or a stopped run's in doubt), in
            # order, without reading the run's settled history: flat in a run's length.
            models.Index(
                fields=["run", "position", "created_at"],
                condition=Q(status__in=_OPEN),
                name="action_open_by_run",
            ),
            # The inbox's duplicate notice: the tenant's other intents with a request's
            # digest (runs.selectors.duplicates), without reading its history.
            models.Index(fields=["tenant", "intent_digest"], name="action_tenant_digest"),
            # The inbox's expired section: the latest expiries first, without the rest.
            models.Index(
                fields=["tenant", "expires_at"],
                condition=Q(status="expired"),
                name="action_expired_recent",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool} {self.target} ({self.status})"


OPEN_ACTION_STATUSES = frozenset(Action.Status(status) for status in _OPEN)


class Approval(models.Model):
    """One person's decision on one frozen intent, bound to what they saw."""

    class Decision(models.TextChoices):
        APPROVE = "approve"
        REJECT = "reject"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    action = models.ForeignKey(Action, on_delete=models.PROTECT, related_name="approvals")
    decision = models.CharField(max_length=8, choices=Decision.choices)
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    reason = models.TextField(blank=True)
    intent_digest = models.CharField(max_length=71)
    state_version = models.PositiveIntegerField()
    target_scope = models.CharField(max_length=500)
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField()
    # The plan digest a plan's approval is bound to, besides the item's own digest.
    plan_digest = models.CharField(max_length=71, blank=True)
    # A grant a standing rule made (its approver is one of the rule's approvers), or null.
    rule = models.ForeignKey(
        "runs.StandingGrant",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="grants",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["action", "approver"], name="approval_one_per_person"),
            models.CheckConstraint(
                condition=Q(decision__in=["approve", "reject"]), name="approval_known_decision"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.decision} by {self.approver_id} on {self.action_id}"


class Attempt(models.Model):
    class Status(models.TextChoices):
        SENDING = "sending"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        UNCERTAIN = "uncertain"
        SETTLED_BY_QUERY = "settled_by_query"

    action = models.ForeignKey(Action, on_delete=models.PROTECT, related_name="attempts")
    number = models.PositiveIntegerField()
    worker = models.CharField(max_length=200)
    lease_version = models.BigIntegerField()
    status = models.CharField(max_length=32, choices=Status.choices, default=Status.SENDING)
    error_class = models.CharField(max_length=64, blank=True)
    error = models.TextField(blank=True)
    retry_after = models.FloatField(null=True, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["action", "number"]
        constraints = [
            models.UniqueConstraint(fields=["action", "number"], name="attempt_unique_number"),
            models.UniqueConstraint(
                fields=["action"], condition=Q(status="sending"), name="attempt_one_sending"
            ),
        ]
        indexes = [
            models.Index(
                fields=["started_at"], condition=Q(status="sending"), name="attempt_sending_queue"
            ),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.action_id} ({self.status})"


class Receipt(models.Model):
    """The external system's proof of one effect. Its digest must equal the intent's."""

    class Source(models.TextChoices):
        RESPONSE = "response"
        QUERY = "query"
        READ = "read"
        RECONCILER = "reconciler"

    # The statuses of a receipt a reconciler made from what they saw, where the external
    # system gave no digest: a record its probes read or the state observed, a receipt id.
    OBSERVED = "observed"
    ATTESTED = "attested"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    action = models.OneToOneField(Action, on_delete=models.PROTECT, related_name="receipt")
    idempotency_key = models.CharField(max_length=900, blank=True)
    intent_digest = models.CharField(max_length=71)
    receipt_id = models.CharField(max_length=200)
    target_version = models.BigIntegerField(null=True, blank=True)
    status = models.CharField(max_length=64)
    raw_response_hash = models.CharField(max_length=71, blank=True)
    source = models.CharField(max_length=16, choices=Source.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["idempotency_key"], name="receipt_key"),
            models.Index(fields=["receipt_id"], name="receipt_external_id"),
        ]

    def __str__(self) -> str:
        return f"receipt {self.receipt_id} for {self.idempotency_key}"


class OutboxMessage(models.Model):
    """Work to hand to RQ, written in the same transaction as the state change that needs it.

    `job` is the dotted path of the job function, so `runs` can hand work to apps that
    import it (reconciliation) without importing them.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    job = models.CharField(max_length=200)
    run = models.ForeignKey(Run, on_delete=models.PROTECT, null=True, blank=True)
    action = models.ForeignKey(Action, on_delete=models.PROTECT, null=True, blank=True)
    payload = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # When RQ got the job; cleared to hand it over again (a notification to retry).
    delivered_at = models.DateTimeField(null=True, blank=True)
    delivery_attempts = models.PositiveIntegerField(default=0)
    # Not handed over again before this time (a notification's backoff).
    relay_after = models.DateTimeField(null=True, blank=True)
    # Notifications only: when the channel accepted it (or the moment had passed), and why
    # the last try did not.
    confirmed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["created_at"],
                condition=Q(delivered_at__isnull=True),
                name="outbox_undelivered",
            ),
        ]

    def __str__(self) -> str:
        return f"outbox {self.pk} {self.job}"
