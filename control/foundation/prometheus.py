"""Prometheus' text format and the access rule for `/metrics`: part of the foundation.

Each app owns the queries for its own numbers (runs/metrics.py, reconciliation/metrics.py)
and builds `Metric`s with this module; control/metrics.py, the composition root, assembles
them into one scrape.

Access: `Authorization: Bearer <COUNTERSIGN_METRICS_TOKEN>`, or a client address inside
COUNTERSIGN_METRICS_NETWORKS (CIDRs, after COUNTERSIGN_TRUSTED_PROXY_COUNT). With neither
configured the endpoint does not exist (404).
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.conf import settings
from django.http import HttpRequest
from django.utils import timezone

from control.auth.clients import client_address

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class Metric:
    name: str
    kind: str  # gauge | counter | histogram
    help: str
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)

    def add(self, value: float, suffix: str = "", **labels: str) -> Metric:
        self.samples.append((suffix, labels, value))
        return self


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def format_number(value: float) -> str:
    if value == float("inf"):
        return "+Inf"
    return (
        repr(float(value))
        if isinstance(value, float) and not value.is_integer()
        else str(int(value))
    )


def render(metrics: Iterable[Metric]) -> str:
    lines = []
    for metric in metrics:
        full = f"countersign_{metric.name}"
        lines.append(f"# HELP {full} {metric.help}")
        lines.append(f"# TYPE {full} {metric.kind}")
        for suffix, labels, value in metric.samples:
            label_text = ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(labels.items()))
            label_text = f"{{{label_text}}}" if label_text else ""
            lines.append(f"{full}{suffix}{label_text} {format_number(value)}")
    return "\n".join(lines) + "\n"


def seconds_since(moment) -> float:
    return max(0.0, (timezone.now() - moment).total_seconds()) if moment else 0.0


def scrape_allowed(request: HttpRequest) -> bool | None:
    """True or False; None when /metrics is not configured at all."""
    token = getattr(settings, "COUNTERSIGN_METRICS_TOKEN", "")
    networks = getattr(settings, "COUNTERSIGN_METRICS_NETWORKS", [])
    if not token and not networks:
        return None
    if token:
        given = request.headers.get("Authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return True
    try:
        address = ipaddress.ip_address(client_address(request))
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(network, strict=False) for network in networks)
