"""Look-alike text: the function that finds it, and the warning the operator pages show."""

from __future__ import annotations

import pytest
from django.urls import reverse

from runs.pages.lookalikes import lookalikes
from tests.pages.conftest import make_waiting

CYRILLIC_A = "\u0430"
SPOOFED = f"ops@ex{CYRILLIC_A}mple.com"


def test_a_domain_with_a_cyrillic_letter_is_flagged_with_its_punycode_and_code_point():
    (flag,) = lookalikes(SPOOFED)
    assert flag.text == f"ex{CYRILLIC_A}mple.com"
    assert flag.why == "is an internationalized domain; mixes Cyrillic and Latin letters"
    assert flag.punycode == "xn--exmple-4nf.com"
    assert flag.code_points == ("U+0430 CYRILLIC SMALL LETTER A",)


def test_a_word_mixing_latin_and_cyrillic_is_flagged_where_it_is_no_domain():
    (flag,) = lookalikes(f"please tell b{CYRILLIC_A}rbara")
    assert (flag.text, flag.why, flag.punycode) == (
        f"b{CYRILLIC_A}rbara",
        "mixes Cyrillic and Latin letters",
        "",
    )


@pytest.mark.parametrize(
    "text", ["ops@example.com", "ticket-7", '{\n  "resolution": "fixed"\n}', "xn--exmple-4nf.com"]
)
def test_ascii_text_is_never_flagged(text):
    assert lookalikes(text) == []


@pytest.mark.parametrize("text", ["привет мир", "Grüße aus Köln", "Tシャツ 東京", "Ελλάδα"])
def test_words_written_in_one_script_are_ordinary_text(text):
    assert lookalikes(text) == []


def test_an_all_cyrillic_domain_mixes_nothing_but_still_shows_what_it_really_is():
    # Every letter of the first label is Cyrillic, and it reads as coco.com.
    (flag,) = lookalikes("ops@\u0441\u043e\u0441\u043e.com")
    assert flag.why == "is an internationalized domain"
    assert flag.punycode == "xn--n1aahb.com"
    assert flag.code_points == (
        "U+0441 CYRILLIC SMALL LETTER ES",
        "U+043E CYRILLIC SMALL LETTER O",
    )


def test_a_fullwidth_letter_imitating_ascii_is_flagged():
    (flag,) = lookalikes("\uff50aypal")
    assert flag.why == "has characters that imitate ASCII"
    assert flag.code_points == ("U+FF50 FULLWIDTH LATIN SMALL LETTER P",)


@pytest.mark.django_db
def test_the_inbox_warns_next_to_a_spoofed_target_with_its_punycode_and_code_point(
    operator_client, tenant
):
    make_waiting(tenant, tool="notify.send", target=SPOOFED, args={"body": "hello"})
    page = operator_client.get(reverse("inbox")).content.decode()
    assert page.count("data-lookalikes") == 1
    assert "Look-alike characters in the target" in page
    assert "xn--exmple-4nf.com" in page
    assert "U+0430 CYRILLIC SMALL LETTER A" in page


@pytest.mark.django_db
def test_the_inbox_shows_no_warning_for_an_ordinary_request(operator_client, tenant):
    make_waiting(tenant, tool="notify.send", target="ops@example.com", args={"body": "Grüße"})
    page = operator_client.get(reverse("inbox")).content.decode()
    assert "data-lookalikes" not in page


@pytest.mark.django_db
def test_the_run_page_warns_about_look_alike_arguments(operator_client, tenant):
    body = f"from b{CYRILLIC_A}rbara"
    action = make_waiting(tenant, tool="notify.send", target="ops@example.com", args={"body": body})
    page = operator_client.get(reverse("run_detail", args=[action.run_id])).content.decode()
    assert "Look-alike characters in the arguments" in page
    assert "U+0430 CYRILLIC SMALL LETTER A" in page
