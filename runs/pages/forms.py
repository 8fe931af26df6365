"""Forms of the operator pages. Each decision form carries the binding the operator saw."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

from django import forms
from django.core.validators import validate_email
from django.utils.html import format_html_join

from runs.models import Action, Risk, Run
from runs.pages.lookalikes import shown, unshown
from runs.tools.errors import ToolError
from runs.tools.registry import all_tools, get_tool

DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
BULK_LIMIT = 100
ARG_PREFIX = "arg__"

PRESET_REASONS = (
    "Wrong target",
    "The arguments are wrong",
    "The observation does not justify this write",
    "Already done another way",
    "Outside this run's goal",
    "Not now: ask again later",
)
# The reasons as a select's options, escaped once: every item in the inbox repeats them.
PRESET_OPTIONS = format_html_join(
    "", "<option>{}</option>", ((reason,) for reason in PRESET_REASONS)
)


def tool_names() -> list[str]:
    return sorted({tool.name for tool in all_tools()})


class BindingForm(forms.Form):
    """What the operator saw: a decision is bound to exactly this digest and state version,
    and, where the page rendered one, the digest of its decision view (checked against the
    view when the decision lands, and signed into the decision receipt)."""

    seen_digest = forms.RegexField(regex=DIGEST_PATTERN, widget=forms.HiddenInput)
    seen_state_version = forms.IntegerField(min_value=0, widget=forms.HiddenInput)
    seen_view = forms.RegexField(regex=DIGEST_PATTERN, required=False, widget=forms.HiddenInput)


class ApproveForm(BindingForm):
    pass


class ReasonMixin(forms.Form):
    preset = forms.ChoiceField(
        label="Reason",
        choices=[("", "Choose a reason…"), *[(reason, reason) for reason in PRESET_REASONS]],
        required=False,
    )
    reason = forms.CharField(
        label="Details for the agent",
        required=False,
        max_length=1800,
        widget=forms.Textarea(attrs={"rows": 2}),
    )

    def clean(self):
        return with_full_reason(super().clean())


def with_full_reason(cleaned: dict) -> dict:
    """Preset and free text become the one reason the agent reads; one of them is needed."""
    preset, text = cleaned.get("preset", ""), cleaned.get("reason", "").strip()
    if not preset and not text:
        raise forms.ValidationError("Say why: choose a reason or write one. The agent reads it.")
    cleaned["full_reason"] = f"{preset}: {text}" if preset and text else preset or text
    return cleaned


class RejectForm(ReasonMixin, BindingForm):
    pass


@dataclass(frozen=True)
class Selection:
    action_pk: str
    seen_state_version: int
    seen_digest: str


def parse_selection(value: str) -> Selection | None:
    """`<action pk>/<state version>/<digest>`: one selected row with the binding shown."""
    parts = value.split("/", 2)
    if len(parts) != 3:
        return None
    pk, version, digest = parts
    try:
        uuid.UUID(pk)
    except ValueError:
        return None
    field = forms.RegexField(regex=DIGEST_PATTERN)
    try:
        field.clean(digest)
    except forms.ValidationError:
        return None
    if not version.isdigit():
        return None
    return Selection(pk, int(version), digest)


class BulkForm(ReasonMixin):
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")])

    def __init__(self, data=None, *args, **kwargs):
        super().__init__(data, *args, **kwargs)
        self.raw_selected = data.getlist("selected") if data is not None else []

    def clean(self):
        cleaned = forms.Form.clean(self)
        selections = [parse_selection(value) for value in self.raw_selected]
        if not selections:
            raise forms.ValidationError("Select at least one request (X, or the checkboxes).")
        if any(selection is None for selection in selections):
            raise forms.ValidationError("A selected row does not carry what you saw. Reload.")
        if len(selections) > BULK_LIMIT:
            raise forms.ValidationError(f"Select at most {BULK_LIMIT} requests at once.")
        cleaned["selections"] = list({s.action_pk: s for s in selections}.values())
        if cleaned.get("decision") == "reject":
            cleaned = with_full_reason(cleaned)
        return cleaned


class FilterForm(forms.Form):
    def value(self, name: str) -> str:
        """A filter's clean value; an invalid one (unknown tool, say) filters nothing."""
        self.is_valid()
        return self.cleaned_data.get(name) or ""


class InboxFilterForm(FilterForm):
    q = forms.CharField(label="Search", required=False, max_length=200)
    tool = forms.ChoiceField(label="Tool", required=False)
    run = forms.CharField(label="Run", required=False, max_length=36)
    proposer = forms.ChoiceField(label="Proposer", required=False)
    risk = forms.TypedChoiceField(
        label="Risk",
        choices=[("", "Any risk"), *Risk.choices],
        coerce=int,
        empty_value=None,
        required=False,
    )
    sort = forms.ChoiceField(
        label="Order",
        choices=[("", "Soonest to expire"), ("risk", "Highest risk first")],
        required=False,
    )

    def __init__(self, data=None, *, proposers: list[str] = (), **kwargs):
        super().__init__(data, **kwargs)
        self.fields["tool"].choices = [("", "Any tool"), *[(t, t) for t in tool_names()]]
        known = list(proposers)
        wanted = (data or {}).get("proposer", "")
        if wanted and wanted not in known:
            known.append(wanted)
        self.fields["proposer"].choices = [("", "Anyone"), *[(p, p) for p in known]]


class RunFilterForm(FilterForm):
    q = forms.CharField(label="Search goals", required=False, max_length=200)
    phase = forms.ChoiceField(
        label="Phase", required=False, choices=[("", "Any phase"), *Run.Phase.choices]
    )
    tool = forms.ChoiceField(label="Tool", required=False)

    def __init__(self, data=None, **kwargs):
        super().__init__(data, **kwargs)
        self.fields["tool"].choices = [("", "Any tool"), *[(t, t) for t in tool_names()]]


class EditArgumentsForm(BindingForm):
    """One field per argument the tool's schema knows (plus any the intent has). Types are
    checked here for quick feedback; the tool's own validation decides in the service."""

    edit_reason = forms.CharField(
        label="Why the change (kept in the audit log)",
        required=False,
        max_length=1800,
        widget=forms.Textarea(attrs={"rows": 2}),
    )

    def __init__(self, data=None, *, action: Action, **kwargs):
        super().__init__(data, **kwargs)
        self.action = action
        try:
            schema = get_tool(action.tool, action.contract_version).args_schema
        except ToolError:
            schema = {}
        properties = schema.get("properties", {})
        required = set(schema.get("required", []))
        self.arg_names = sorted(set(properties) | set(action.args))
        for name in self.arg_names:
            field = _argument_field(name, properties.get(name, {}), required=name in required)
            field.initial = _initial(action.args.get(name), field)
            self.fields[ARG_PREFIX + name] = field

    def bound_arguments(self):
        return [self[ARG_PREFIX + name] for name in self.arg_names]

    def edited_args(self) -> dict:
        """The new arguments: blank optional fields are left out."""
        args = {}
        for name in self.arg_names:
            value = self.cleaned_data.get(ARG_PREFIX + name)
            if value is None or value == "":
                continue
            args[name] = value
        return args


class ShownCharField(forms.CharField):
    """A text argument to edit: invisible and direction-changing characters appear as their
    escapes (`\\u202e`), so the text box does not reorder what the operator reads, and
    become characters again when the form is sent back."""

    def prepare_value(self, value):
        return shown(value) if isinstance(value, str) else value

    def to_python(self, value):
        value = super().to_python(value)
        return unshown(value) if isinstance(value, str) else value


def _argument_field(name: str, spec: dict, *, required: bool) -> forms.Field:
    help_text = spec.get("description", "")
    common = {"label": name, "required": required, "help_text": help_text}
    kind = spec.get("type")
    if kind == "integer":
        return forms.IntegerField(
            min_value=spec.get("minimum"), max_value=spec.get("maximum"), **common
        )
    if kind == "string":
        long_text = spec.get("maxLength", 0) > 200
        widget = forms.Textarea(attrs={"rows": 4}) if long_text else forms.TextInput
        return ShownCharField(
            max_length=spec.get("maxLength"), strip=False, widget=widget, **common
        )
    return forms.JSONField(widget=forms.Textarea(attrs={"rows": 3}), **common)


def _initial(value, field: forms.Field):
    if isinstance(field, forms.JSONField) and value is not None:
        return json.dumps(value)
    return value


def argument_diff(before: dict, after: dict) -> list[dict]:
    """Changed, added and removed arguments, by name."""
    rows = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if name in before and name in after and old == new:
            continue
        change = "changed" if name in before and name in after else "added"
        if name not in after:
            change = "removed"
        rows.append(
            {
                "name": name,
                "change": change,
                "before": json.dumps(old, ensure_ascii=False) if name in before else "",
                "after": json.dumps(new, ensure_ascii=False) if name in after else "",
            }
        )
    return rows


class CancelForm(forms.Form):
    reason = forms.CharField(
        label="Why cancel (recorded in the audit log)",
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
    )


class GiveUpForm(forms.Form):
    reason = forms.CharField(label="Why give up (recorded in the audit log)", max_length=2000)


class ToolPolicyForm(forms.Form):
    tool = forms.ChoiceField(widget=forms.HiddenInput)
    needs_approval = forms.BooleanField(label="Needs approval", required=False)
    four_eyes = forms.BooleanField(label="Four eyes (the proposer may not approve)", required=False)
    required_approvals = forms.IntegerField(label="Approvals needed", min_value=1, max_value=10)
    approval_minutes = forms.IntegerField(
        label="Default expiry (minutes)", min_value=1, max_value=30 * 24 * 60
    )
    standing_grants_allowed = forms.BooleanField(label="Standing rules allowed", required=False)
    escalation_minutes = forms.IntegerField(
        label="Escalate after (minutes)", min_value=1, max_value=30 * 24 * 60, required=False
    )
    escalation_contacts = forms.CharField(
        label="Escalation contacts", required=False, max_length=2000
    )
    link_only_decisions = forms.BooleanField(
        label="Decide from the mail link without signing in", required=False
    )
    risk = forms.TypedChoiceField(
        label="Risk",
        choices=[("", "by its nature"), *Risk.choices],
        coerce=int,
        empty_value=None,
        required=False,
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["tool"].choices = [(t, t) for t in tool_names()]

    def clean_escalation_contacts(self) -> list[str]:
        return email_addresses(self.cleaned_data.get("escalation_contacts", ""))

    def clean(self):
        cleaned = super().clean()
        if not cleaned.get("needs_approval") and (
            cleaned.get("four_eyes") or (cleaned.get("required_approvals") or 1) > 1
        ):
            raise forms.ValidationError(
                "Four eyes and several approvals only apply when the tool needs approval."
            )
        minutes, contacts = cleaned.get("escalation_minutes"), cleaned.get("escalation_contacts")
        if minutes and not contacts and "escalation_contacts" not in self.errors:
            self.add_error("escalation_contacts", "Name at least one address to escalate to.")
        if contacts and not minutes and "escalation_minutes" not in self.errors:
            self.add_error("escalation_minutes", "Say after how many minutes to escalate.")
        return cleaned


class StandingRuleForm(forms.Form):
    """A new standing rule: which intents of one tool it approves, and its limits."""

    tool = forms.ChoiceField(label="Tool")
    name = forms.CharField(label="Name", max_length=200)
    target_pattern = forms.CharField(
        label="Target pattern (regular expression; empty: any target)",
        max_length=500,
        required=False,
    )
    arg_bounds = forms.CharField(
        label="Argument bounds (JSON)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Per argument: minimum, maximum, enum, pattern. "
        '{"amount_cents": {"maximum": 5000}}',
    )
    max_uses = forms.IntegerField(label="Uses at most", min_value=1, required=False)
    uses_per_hour = forms.IntegerField(label="Uses per hour at most", min_value=1, required=False)
    amount_argument = forms.CharField(label="Amount argument", max_length=100, required=False)
    amount_cap = forms.DecimalField(
        label="Cumulative cap on that amount", max_digits=24, decimal_places=6, required=False
    )
    days = forms.IntegerField(label="Expires in (days)", min_value=1, max_value=365, initial=7)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["tool"].choices = [(t, t) for t in tool_names()]

    def clean_arg_bounds(self) -> dict:
        text = self.cleaned_data["arg_bounds"].strip()
        if not text:
            return {}
        try:
            bounds = json.loads(text)
        except ValueError as error:
            raise forms.ValidationError(f"not JSON: {error}") from None
        if not isinstance(bounds, dict):
            raise forms.ValidationError("an object of argument names")
        return bounds


class RevokeRuleForm(forms.Form):
    reason = forms.CharField(label="Why", max_length=2000)


ESCALATION_CONTACTS_LIMIT = 20


def email_addresses(text: str) -> list[str]:
    """Addresses separated by commas, semicolons or spaces; each one checked, none repeated.
    Every address that is not one is named in the error."""
    candidates = [part for part in re.split(r"[\s,;]+", text.strip()) if part]
    wrong = []
    for candidate in candidates:
        try:
            validate_email(candidate)
        except forms.ValidationError:
            wrong.append(f"“{candidate}”")
    if wrong:
        noun = "is not an email address" if len(wrong) == 1 else "are not email addresses"
        raise forms.ValidationError(f"{', '.join(wrong)} {noun}.")
    addresses = list(dict.fromkeys(candidates))
    if len(addresses) > ESCALATION_CONTACTS_LIMIT:
        raise forms.ValidationError(f"At most {ESCALATION_CONTACTS_LIMIT} addresses.")
    return addresses
