"""Plain helpers for talking to a running sandbox over real HTTP (tests/sandbox, tests/tools)."""

from __future__ import annotations

from typing import Any

import requests

TIMEOUT = (2.0, 10.0)


def set_fault(sandbox_url: str, *, tool: str, fault: str, count: int = 1) -> None:
    response = requests.post(
        sandbox_url + "faults", json={"tool": tool, "fault": fault, "count": count}, timeout=TIMEOUT
    )
    assert response.status_code == 201, response.text


def effects(sandbox_url: str, **params: str) -> list[dict[str, Any]]:
    response = requests.get(sandbox_url + "effects", params=params, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    return response.json()["effects"]


def close_ticket(
    sandbox_url: str,
    ticket_id: str,
    *,
    key: str,
    args: dict[str, Any] | None = None,
    timeout: tuple[float, float] = TIMEOUT,
) -> requests.Response:
    return requests.post(
        f"{sandbox_url}tickets/{ticket_id}/close",
        json={"args": args or {}},
        headers={"Idempotency-Key": key},
        timeout=timeout,
    )


def ticket(sandbox_url: str, ticket_id: str) -> dict[str, Any]:
    response = requests.get(f"{sandbox_url}tickets/{ticket_id}", timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    return response.json()
