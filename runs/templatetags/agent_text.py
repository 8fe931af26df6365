"""Filters for text an agent wrote, wherever a page shows it (targets, arguments).

`shown` writes invisible and direction-changing characters as escapes (`\\u202e`), so a page
never renders them; `lookalike_flags` finds what templates/runs/_lookalikes.html warns about. They
are filters rather than presenter properties because the same target appears on pages built
from many shapes (an action, a plan row, a case, a receipt).
"""

from __future__ import annotations

from django import template

from runs.pages.lookalikes import Lookalike, lookalikes, shown

register = template.Library()


@register.filter(name="shown")
def shown_filter(value) -> str:
    """A one-line value (a target): every hidden character escaped, newlines included."""
    return shown(str(value))


@register.filter
def shown_json(value) -> str:
    """Pretty-printed JSON: its own layout newlines kept, every other hidden one escaped."""
    return shown(str(value), keep="\n")


@register.filter
def lookalike_flags(value) -> list[Lookalike]:
    return lookalikes(str(value))
