"""One way to show a moment on every page: absolute, with its time zone, the relative beside.

`{{ value|moment }}` renders `<time datetime="2026-12-07T13:58:04+00:00">2026-12-07 13:58:04
UTC</time> <span class="ago">(3 minutes ago)</span>` in the reader's time zone (the one
activated for the request); a moment ahead reads "in 3 minutes". `|moment:"short"` puts the
relative part in the title instead, for dense tables.
Within a minute either way it reads "just now".
"""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.timesince import timesince, timeuntil

register = template.Library()
FORMAT = "Y-m-d H:i:s T"


def relative(value: datetime, now: datetime | None = None) -> str:
    now = now or timezone.now()
    if abs((now - value).total_seconds()) < 60:
        return "just now"
    if value <= now:
        return f"{timesince(value, now, depth=1)} ago"
    return f"in {timeuntil(value, now, depth=1)}"


@register.filter
def moment(value, style: str = "") -> SafeString | str:
    if not isinstance(value, datetime):
        return ""
    shown = timezone.localtime(value) if timezone.is_aware(value) else value
    absolute = date_format(shown, FORMAT)
    if style == "short":
        return format_html(
            '<time datetime="{}" title="{}">{}</time>', value.isoformat(), relative(value), absolute
        )
    return format_html(
        '<time datetime="{}">{}</time> <span class="ago">({})</span>',
        value.isoformat(),
        absolute,
        relative(value),
    )
