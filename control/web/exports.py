"""Streamed CSV for the pages' exports (receipts, audit): safe cells, one line at a time.

A cell that starts like a formula (`=`, `+`, `-`, `@`, a tab or a carriage return) is a
formula to a spreadsheet; targets, receipt ids, actors and reasons come from agents, people
and external systems, so none is trusted to be plain text: such a cell gets a leading `'`.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_cell(value) -> str | int:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, dict | list):
        value = json.dumps(value, sort_keys=True, ensure_ascii=False)
    text = str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


class _Echo:
    """A file whose write returns the line, for csv.writer to build lines one at a time."""

    def write(self, value: str) -> str:
        return value


def csv_lines(header: Sequence[str], rows: Iterable[Sequence]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(header)
    for row in rows:
        yield writer.writerow([spreadsheet_cell(value) for value in row])
