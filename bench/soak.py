"""The chaos soak: many runs through real worker, sweeper and web processes while workers are
SIGKILLed, Redis is flushed and PostgreSQL restarts; then the invariants, counted.

Intents are `payment.charge` (idempotent, queryable by key) and `notify.send` (neither),
sent to the sandbox over HTTP; the sandbox's effects ledger is the ground truth. Runs
arrive in waves, approved up front, while the chaos schedule (seeded) plays. A quiet phase
follows: dead workers are replaced and the sweep re-drives until every intent is terminal
or in reconciliation, or the deadline passes. Violations:
- an intent with more than one effect (a duplicate);
- a lost intent (neither terminal nor uncertain-with-a-case at the deadline);
- an effect the run does not know of (the ledger has it, the intent is not done or in doubt);
- a success without its effect, or a run whose event chain or checkpoint fails to verify.
"""

from __future__ import annotations

import random
import subprocess
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import requests
from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import Count
from django.db.utils import DatabaseError
from django.utils import timezone

from bench.builder import RunSpec, build_and_insert
from bench.measure import make_bench_tenant, queue, relay_all
from bench.processes import Children, wait_for
from reconciliation.models import ReconciliationCase
from runs.models import Action
from runs.record.verification import run_verify
from runs.services import connectors_enable
from sandbox.models import Effect

TERMINAL = {"succeeded", "satisfied", "failed", "rejected", "expired", "cancelled", "superseded"}
CHILD_LEASE_SECONDS = "3"


@dataclass
class SoakConfig:
    runs: int = 1000
    workers: int = 2
    waves: int = 10
    kills: int = 8
    redis_flushes: int = 3
    postgres_restart: bool = True
    postgres_cluster: str = "main"
    notify_share: float = 0.2
    seed: int = 0
    settle_timeout: float = 240.0
    sandbox_url: str = ""  # empty: the soak starts its own web process


@dataclass
class SoakReport:
    runs: int = 0
    chaos: Counter = field(default_factory=Counter)
    statuses: Counter = field(default_factory=Counter)
    max_effects_per_intent: int = 0
    duplicated_intents: int = 0
    lost: list[str] = field(default_factory=list)
    unknown_effects: list[str] = field(default_factory=list)
    successes_without_effect: list[str] = field(default_factory=list)
    unverified_runs: list[str] = field(default_factory=list)
    cases: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def violations(self) -> list[str]:
        found = []
        if self.duplicated_intents:
            found.append(f"{self.duplicated_intents} intents had more than one effect")
        if self.lost:
            found.append(f"{len(self.lost)} intents lost: {self.lost[:5]}")
        if self.unknown_effects:
            found.append(f"{len(self.unknown_effects)} effects unknown to their runs")
        if self.successes_without_effect:
            found.append(f"{len(self.successes_without_effect)} successes without an effect")
        if self.unverified_runs:
            found.append(f"{len(self.unverified_runs)} runs failed verification")
        return found

    def table(self) -> str:
        rows = [
            ("runs", self.runs),
            ("chaos: worker kills", self.chaos["kill"]),
            ("chaos: Redis flushes", self.chaos["redis_flush"]),
            ("chaos: PostgreSQL restarts", self.chaos["postgres_restart"]),
            ("max effects per intent", self.max_effects_per_intent),
            ("intents with duplicate effects", self.duplicated_intents),
            ("lost intents", len(self.lost)),
            ("effects unknown to their run", len(self.unknown_effects)),
            ("successes without an effect", len(self.successes_without_effect)),
            ("runs failing verify_run", len(self.unverified_runs)),
            ("reconciliation cases opened", sum(self.cases.values())),
            *((f"  cases {status}", count) for status, count in sorted(self.cases.items())),
            *((f"intents {status}", count) for status, count in sorted(self.statuses.items())),
            ("seconds", round(self.seconds, 1)),
        ]
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)


def _db_retrying(query, *, attempts: int = 60):
    """Runs a read, riding out a PostgreSQL restart (reconnecting between tries)."""
    for attempt in range(attempts):
        try:
            return query()
        except DatabaseError:
            if attempt == attempts - 1:
                raise
            connection.close()
            time.sleep(0.5)
            close_old_connections()
    return None


class Soak:
    def __init__(self, config: SoakConfig, say) -> None:
        self.config = config
        self.say = say
        self.rng = random.Random(config.seed)
        self.children = Children()
        self.workers: list[subprocess.Popen] = []
        self.report = SoakReport()
        self.tag = uuid.uuid4().hex[:6]

    def run(self) -> SoakReport:
        started = time.monotonic()
        try:
            self._start_processes()
            bench = make_bench_tenant(f"soak{self.tag}")
            self.tenant = bench.tenant
            # Its writes go to the sandbox's notifier and payments: enabled like any tenant's.
            connectors_enable(tenant=bench.tenant, connectors=["notify", "payment"], actor="soak")
            self._chaos_while_seeding(bench)
            self._quiet_phase()
        finally:
            self.children.stop_all()
        self._check()
        self.report.seconds = time.monotonic() - started
        return self.report

    # --- processes -------------------------------------------------------------------------

    def _start_processes(self) -> None:
        extra = {"COUNTERSIGN_LEASE_SECONDS": CHILD_LEASE_SECONDS}
        if not self.config.sandbox_url:
            port = 18500 + self.rng.randrange(400)
            # Threaded runserver with persistent connections keeps one per request thread
            # until PostgreSQL runs out of slots: serve the sandbox with CONN_MAX_AGE=0.
            self.children.start(
                ["manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
                COUNTERSIGN_BENCH_CONN_MAX_AGE="0",
            )
            self.config.sandbox_url = f"http://127.0.0.1:{port}/sandbox/"
            wait_for(self._sandbox_answers, timeout=60, interval=0.2, what="the sandbox")
        self.child_env = {**extra, "COUNTERSIGN_SANDBOX_URL": self.config.sandbox_url}
        self.workers = [
            self.children.start_worker(**self.child_env) for _ in range(self.config.workers)
        ]
        self.children.start(
            ["manage.py", "sweep", "--loop", "--interval", "0.5", "-v", "0"], **self.child_env
        )

    def _sandbox_answers(self) -> bool:
        try:
            answer = requests.get(self.config.sandbox_url + "effects", timeout=2)
        except requests.RequestException:
            return False
        return answer.status_code < 500

    def _replace_dead_workers(self) -> None:
        for index, process in enumerate(self.workers):
            if process.poll() is not None:
                self.children.stop(process)
                self.workers[index] = self.children.start_worker(**self.child_env)

    # --- the runs and the chaos ------------------------------------------------------------

    def _specs(self, bench, start: int, count: int):
        for number in range(start, start + count):
            if self.rng.random() < self.config.notify_share:
                yield RunSpec(
                    tenant=bench.tenant,
                    tool="notify.send",
                    target=f"soak-{self.tag}-{number}@example.com",
                    args={"body": f"soak message {number}"},
                    approver=bench.operator,
                )
            else:
                yield RunSpec(
                    tenant=bench.tenant,
                    tool="payment.charge",
                    target=f"cus_{self.tag}_{number}",
                    args={"amount_cents": 100 + number, "currency": "EUR"},
                    approver=bench.operator,
                )

    def _chaos_while_seeding(self, bench) -> None:
        config = self.config
        per_wave = max(1, config.runs // config.waves)
        waves = [per_wave] * (config.runs // per_wave)
        if config.runs % per_wave:
            waves.append(config.runs % per_wave)
        moments = len(waves) * 2
        schedule = ["kill"] * config.kills + ["redis_flush"] * config.redis_flushes
        schedule += [""] * max(0, moments - len(schedule))
        self.rng.shuffle(schedule)
        restart_at = moments // 2 if config.postgres_restart else -1
        seeded = 0
        for moment in range(max(moments, len(schedule))):
            if moment % 2 == 0 and moment // 2 < len(waves):
                count = waves[moment // 2]
                _, _, messages = _db_retrying(
                    lambda start=seeded, count=count: build_and_insert(
                        self._specs(bench, start, count), now=timezone.now()
                    )
                )
                relay_all(messages)
                seeded += count
                self.report.runs = seeded
            event = schedule[moment] if moment < len(schedule) else ""
            if event:
                self._chaos(event)
            if moment == restart_at:
                self._chaos("postgres_restart")
            time.sleep(self.rng.uniform(0.5, 1.5))
            self._replace_dead_workers()

    def _chaos(self, event: str) -> None:
        self.report.chaos[event] += 1
        self.say(f"chaos: {event}")
        if event == "kill":
            victim = self.rng.choice(self.workers)
            self.children.kill(victim)
        elif event == "redis_flush":
            queue().connection.flushdb()
        elif event == "postgres_restart":
            version = sorted(p.name for p in Path("/etc/postgresql").iterdir())[-1]
            subprocess.run(
                [
                    "pg_ctlcluster",
                    "--skip-systemctl-redirect",
                    version,
                    self.config.postgres_cluster,
                    "restart",
                ],
                check=True,
                capture_output=True,
                timeout=120,
            )
            connection.close()

    def _quiet_phase(self) -> None:
        deadline = time.monotonic() + self.config.settle_timeout
        while time.monotonic() < deadline:
            self._replace_dead_workers()
            if _db_retrying(self._settled):
                return
            time.sleep(1.0)
        self.say("quiet phase: deadline reached before everything settled")

    def _settled(self) -> bool:
        actions = Action.objects.filter(tenant=self.tenant)
        unsettled = actions.exclude(status__in=[*TERMINAL, "uncertain"]).exists()
        probing = ReconciliationCase.objects.filter(tenant=self.tenant, status="probing").exists()
        uncased = (
            actions.filter(status="uncertain")
            .exclude(cases__status__in=["probing", "open", "awaiting_second"])
            .exists()
        )
        return not (unsettled or probing or uncased)

    # --- the verdict -----------------------------------------------------------------------

    def _check(self) -> None:
        close_old_connections()
        report = self.report
        actions = list(
            Action.objects.filter(tenant=self.tenant).select_related("run").order_by("created_at")
        )
        effects = Counter()
        for tool, target, key in Effect.objects.filter(
            tool__in=["payment.charge", "notify.send"], target__contains=self.tag
        ).values_list("tool", "target", "idempotency_key"):
            effects[key if tool == "payment.charge" else target] += 1
        open_cases = set(
            ReconciliationCase.objects.filter(tenant=self.tenant)
            .exclude(status="resolved")
            .values_list("action_id", flat=True)
        )
        for status, count in (
            ReconciliationCase.objects.filter(tenant=self.tenant)
            .values_list("status")
            .annotate(n=Count("pk"))
        ):
            report.cases[status] = count
        for action in actions:
            report.statuses[action.status] += 1
            seen = effects[
                action.idempotency_key if action.tool == "payment.charge" else action.target
            ]
            report.max_effects_per_intent = max(report.max_effects_per_intent, seen)
            report.duplicated_intents += seen > 1
            in_reconciliation = action.status == "uncertain" and action.pk in open_cases
            if action.status not in TERMINAL and not in_reconciliation:
                report.lost.append(f"{action.action_id}@{action.run_id} {action.status}")
            if seen and action.status not in ("succeeded", "uncertain"):
                report.unknown_effects.append(str(action.pk))
            if action.status == "succeeded" and not seen:
                report.successes_without_effect.append(str(action.pk))
            if run_verify(action.run):
                report.unverified_runs.append(str(action.run_id))


def run_soak(config: SoakConfig, say=print) -> SoakReport:
    if settings.SANDBOX_FAULTS:
        say("note: SANDBOX_FAULTS is on; the soak plans no faults of its own")
    return Soak(config, say).run()
