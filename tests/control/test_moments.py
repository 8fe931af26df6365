"""`|moment`: one format for a moment everywhere, in the reader's time zone, relative beside."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import time_machine
from django.utils import timezone

from control.templatetags.moments import moment, relative

NOON = datetime(2026, 12, 7, 12, 0, 0, tzinfo=UTC)


def test_a_moment_is_shown_in_the_active_time_zone_with_its_name_and_the_iso_value():
    with timezone.override("Europe/Paris"):
        shown = moment(NOON)
    assert '<time datetime="2026-12-07T12:00:00+00:00">2026-12-07 13:00:00 CET</time>' in shown


def test_short_puts_the_relative_part_in_the_title_and_not_beside():
    with time_machine.travel(NOON + timedelta(hours=2), tick=False), timezone.override("UTC"):
        shown = moment(NOON, "short")
        full = moment(NOON)
    assert shown == (
        '<time datetime="2026-12-07T12:00:00+00:00" title="2\xa0hours ago">'
        "2026-12-07 12:00:00 UTC</time>"
    )
    assert full.endswith('<span class="ago">(2\xa0hours ago)</span>')


def test_the_relative_part_reads_back_ahead_or_just_now():
    assert relative(NOON - timedelta(hours=3), NOON) == "3\xa0hours ago"
    assert relative(NOON + timedelta(minutes=5), NOON) == "in 5\xa0minutes"
    assert relative(NOON - timedelta(seconds=20), NOON) == "just now"


def test_anything_but_a_moment_shows_nothing():
    assert moment(None) == ""
    assert moment("2026-12-07") == ""
