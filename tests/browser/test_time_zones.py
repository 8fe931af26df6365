"""A person's time zone in a real browser: chosen on their page, named in the header, and
every moment on the run page shown in it."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from tests.browser.conftest import log_in, screenshot
from tests.factories import make_action, make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_person_chooses_their_zone_and_the_pages_follow_it(page):
    tenant = make_tenant()
    make_user(tenant, "operator", username="olivia")
    action = make_action(make_run(tenant))
    log_in(page, "olivia")

    page.locator("[data-time-zone]").click()
    page.wait_for_url(f"**{reverse('time_zone')}")
    page.get_by_label("Time zone").select_option("Asia/Tokyo")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".messages")).to_contain_text("Times are now shown in Asia/Tokyo")
    expect(page.locator("[data-time-zone]")).to_have_text("Asia/Tokyo")
    screenshot(page, "time-zone")

    page.goto(reverse("run_detail", args=[action.run_id]))
    stamps = [text for text in page.locator("main time").all_inner_texts() if ":" in text]
    assert stamps, "the run page shows no moment"
    assert all(re.search(r"\d\d:\d\d:\d\d JST$", stamp) for stamp in stamps), stamps
    expect(page.locator("main .ago").first).to_contain_text("just now")
