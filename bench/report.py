"""The benchmark's table: each figure beside its target and how far it is from it."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    unit: str
    # (">=" | "<=" | "<", number) or None for a figure without a target
    target: tuple[str, float] | None = None
    note: str = ""

    @property
    def meets(self) -> bool | None:
        if self.target is None or math.isnan(self.value):
            return None
        op, bound = self.target
        return {
            ">=": self.value >= bound,
            "<=": self.value <= bound,
            "<": self.value < bound,
        }[op]

    @property
    def distance(self) -> str:
        """The figure as a share of its target (x for floors, over/under for ceilings)."""
        if self.target is None or math.isnan(self.value):
            return ""
        op, bound = self.target
        if op == ">=":
            return f"{self.value / bound:.2f}x of target"
        return f"{self.value / bound:.2f}x of limit"

    def row(self) -> list[str]:
        target = f"{self.target[0]} {_number(self.target[1])}" if self.target else ""
        verdict = {True: "ok", False: "MISS", None: ""}[self.meets]
        return [
            self.name,
            f"{_number(self.value)} {self.unit}".strip(),
            target,
            verdict,
            self.distance,
            self.note,
        ]


def _number(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if value >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:,.2f}"


def table(figures: list[Figure]) -> str:
    header = ["figure", "measured", "target", "", "distance", "note"]
    rows = [header] + [figure.row() for figure in figures]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for number, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
        if number == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines)


def as_json(figures: list[Figure], *, command: str) -> str:
    return json.dumps(
        {
            "command": command,
            "figures": [{**asdict(f), "meets": f.meets, "distance": f.distance} for f in figures],
        },
        indent=2,
    )
