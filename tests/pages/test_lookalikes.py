"""Look-alike text: the function that finds it, and the warning the operator pages show."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from django.urls import reverse

from runs.decision_links import decision_link_url
from runs.pages.lookalikes import lookalikes, shown, unshown
from runs.selectors.plans import ITEMS_SHOWN
from tests.api.support import make_uncertain_with_case
from tests.factories import approve, make_notify_plan, make_user
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


# A right-to-left override makes "refund 0001$" read as "refund $1000": an agent's argument
# must never render it, only its escape, and every page that shows it warns.
OVERRIDE = "\u202e"
OVERRIDDEN_BODY = f"refund {OVERRIDE}0001$ to acct 42"


def test_invisible_and_direction_changing_characters_are_flagged_with_their_escape():
    for char, name in [
        ("\u202e", "RIGHT-TO-LEFT OVERRIDE"),
        ("\u2066", "LEFT-TO-RIGHT ISOLATE"),
        ("\u200b", "ZERO WIDTH SPACE"),
        ("\u2060", "WORD JOINER"),
        ("\ufeff", "ZERO WIDTH NO-BREAK SPACE"),
        ("\u00ad", "SOFT HYPHEN"),
        ("\u061c", "ARABIC LETTER MARK"),  # another Cf
    ]:
        (flag,) = lookalikes(f"pay{char}ee")
        assert flag.text == f"pay\\u{ord(char):04x}ee"
        assert "invisible or direction-changing" in flag.why
        assert flag.code_points == (f"U+{ord(char):04X} {name}",)


def test_shown_writes_hidden_characters_as_escapes_and_keeps_layout_where_asked():
    assert shown(f"a{OVERRIDE}b\nc") == "a\\u202eb\\u000ac"
    assert shown(f"a{OVERRIDE}b\nc", keep="\n") == "a\\u202eb\nc"
    assert shown("Grüße, привет") == "Grüße, привет"


def _assert_escaped_and_flagged(page: str) -> None:
    assert OVERRIDE not in page
    assert "refund \\u202e0001$ to acct 42" in page  # the arguments, escaped
    assert "Look-alike characters in the arguments" in page
    assert "U+202E RIGHT-TO-LEFT OVERRIDE" in page


def _waiting_override(tenant):
    return make_waiting(
        tenant, tool="notify.send", target="ops@example.com", args={"body": OVERRIDDEN_BODY}
    )


@pytest.mark.django_db
@pytest.mark.parametrize("page_name", ["inbox", "run_detail", "inbox_edit"])
def test_operator_pages_escape_and_flag_a_direction_override(operator_client, tenant, page_name):
    action = _waiting_override(tenant)
    args = {"inbox": [], "run_detail": [action.run_id], "inbox_edit": [action.pk]}[page_name]
    response = operator_client.get(reverse(page_name, args=args))
    assert response.status_code == 200
    _assert_escaped_and_flagged(response.content.decode())


@pytest.mark.django_db
def test_the_decision_link_page_escapes_and_flags_a_direction_override(client, tenant):
    action = _waiting_override(tenant)
    olivia = make_user(tenant, "operator")
    path = urlsplit(decision_link_url(action=action, approver_pk=olivia.pk)).path
    response = client.get(path)
    assert response.status_code == 200
    _assert_escaped_and_flagged(response.content.decode())


def _override_plan(tenant, count: int = 3):
    """A plan whose last intent's arguments carry the override."""
    bodies = {f"c{n}@example.com": f"hello {n}" for n in range(1, count)}
    return make_notify_plan(
        tenant, goal="tell the customers", bodies={**bodies, "last@example.com": OVERRIDDEN_BODY}
    )


@pytest.mark.django_db
def test_a_plan_is_flagged_in_the_inbox_and_on_its_page(operator_client, tenant):
    plan = _override_plan(tenant)
    inbox = operator_client.get(reverse("inbox")).content.decode()
    assert OVERRIDE not in inbox
    assert "Look-alike characters in the arguments of #3" in inbox
    assert "U+202E RIGHT-TO-LEFT OVERRIDE" in inbox
    page = operator_client.get(reverse("inbox_plan", args=[plan.pk])).content.decode()
    _assert_escaped_and_flagged(page)


@pytest.mark.django_db
def test_a_plan_card_checks_items_beyond_those_it_lists(operator_client, tenant):
    # The card lists the first ITEMS_SHOWN intents; a spoof hidden at the end is still flagged.
    _override_plan(tenant, count=ITEMS_SHOWN + 5)
    inbox = operator_client.get(reverse("inbox")).content.decode()
    assert f"Look-alike characters in the arguments of #{ITEMS_SHOWN + 5}" in inbox


@pytest.mark.django_db
def test_the_reconciliation_case_escapes_and_flags_a_direction_override(client, tenant):
    action = _waiting_override(tenant)
    approve(action, make_user(tenant, "operator"))
    case = make_uncertain_with_case(action)
    client.force_login(make_user(tenant, "reconciler"))
    response = client.get(reverse("case_detail", args=[case.pk]))
    assert response.status_code == 200
    _assert_escaped_and_flagged(response.content.decode())


def test_unshown_restores_only_escapes_of_hidden_characters():
    text = f"a{OVERRIDE}b\u200bc \\u0041 \\\\n"
    assert unshown(shown(text)) == text
    assert unshown("\\u0041") == "\\u0041"  # an ordinary letter's escape is the operator's text


@pytest.mark.django_db
def test_the_edit_form_shows_the_escape_and_sending_it_back_changes_nothing(
    operator_client, tenant
):
    action = _waiting_override(tenant)
    url = reverse("inbox_edit", args=[action.pk])
    escaped = "refund \\u202e0001$ to acct 42"
    assert escaped in operator_client.get(url).content.decode()  # in the text box, escaped

    sent_back = {
        "seen_digest": action.intent_digest,
        "seen_state_version": action.base_version,
        "arg__body": escaped,
        "step": "review",
    }
    page = operator_client.post(url, sent_back, HTTP_HX_REQUEST="true").content.decode()
    assert "Nothing changed" in page
