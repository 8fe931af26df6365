"""Forms of the reconciliation pages: the queue's filters and one resolution of one case.

The resolution form only shapes what was picked or typed into the service's arguments: whether
the evidence suffices, the digest matches or a resend is confirmed is the service's to decide, so
its refusal (with its reason) is what the reconciler reads.
"""

from __future__ import annotations

from django import forms

from reconciliation.models import ReconciliationCase
from reconciliation.selectors import CaseCounts
from runs.pages.forms import FilterForm, tool_names
from runs.selectors import REASONS

Resolution = ReconciliationCase.Resolution
Status = ReconciliationCase.Status
EVIDENCE_FIELDS = ("receipt_id", "intent_digest", "observed_state")
STATUS_LABELS = {
    "": "Waiting for a person",
    Status.OPEN: "Open",
    Status.AWAITING_SECOND: "Awaiting a second reconciler",
}


def _counted(label: str, count: int) -> str:
    return f"{label} ({count})" if count else label


class CaseFilterForm(FilterForm):
    tool = forms.ChoiceField(label="Tool", required=False)
    reason = forms.ChoiceField(label="Reason", required=False)
    status = forms.ChoiceField(label="Status", required=False)

    def __init__(self, data=None, **kwargs):
        super().__init__(data, **kwargs)
        self.show_counts(CaseCounts())

    def show_counts(self, counts: CaseCounts) -> None:
        """Each choice says how many unresolved cases it would show."""
        self.fields["tool"].choices = [
            ("", "Any tool"),
            *[(tool, _counted(tool, counts.by_tool[tool])) for tool in tool_names()],
        ]
        self.fields["reason"].choices = [
            ("", "Any reason"),
            *[(key, _counted(label, counts.by_reason[key])) for key, label in REASONS.items()],
        ]
        self.fields["status"].choices = [
            (key, _counted(label, counts.by_status[key] if key else counts.waiting))
            for key, label in STATUS_LABELS.items()
        ]


class ResolveForm(forms.Form):
    """One resolution as typed, or (`confirming`) a second reconciler's confirmation of the
    proposed one, which carries the proposal's evidence exactly as it was shown."""

    resolution = forms.ChoiceField(choices=Resolution.choices, widget=forms.HiddenInput)
    note = forms.CharField(
        label="Why (kept in the audit log)",
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    record = forms.RegexField(
        label="The record that is this write's effect",
        regex=r"^[1-9][0-9]{0,3}:[0-9]{1,4}$",
        required=False,
        error_messages={"invalid": "Pick a record the probes read, by its probe and place."},
    )
    receipt_id = forms.CharField(label="Receipt id", required=False, max_length=200)
    intent_digest = forms.CharField(
        label="The intent digest it carries (optional)", required=False, max_length=100
    )
    observed_state = forms.CharField(
        label="Or: the target's state as you observed it",
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    confirm_resend = forms.BooleanField(required=False)
    confirming = forms.BooleanField(required=False, widget=forms.HiddenInput)
    proposed_evidence = forms.JSONField(required=False, widget=forms.HiddenInput)

    @classmethod
    def posted(cls, data) -> ResolveForm:
        """The form as posted, with the field ids of its own panel on the page."""
        return cls(data, auto_id=f"id_{cls.panel_of(data)}_%s")

    @staticmethod
    def panel_of(data) -> str:
        return "confirm" if data.get("confirming") else str(data.get("resolution", ""))[:32]

    def clean_proposed_evidence(self):
        evidence = self.cleaned_data.get("proposed_evidence")
        if evidence is not None and not isinstance(evidence, dict):
            raise forms.ValidationError("The proposal's evidence did not come back intact.")
        return evidence

    def evidence(self) -> dict | None:
        cleaned = self.cleaned_data
        if cleaned["confirming"]:
            return cleaned["proposed_evidence"]
        if cleaned["record"]:
            probe, index = cleaned["record"].split(":")
            return {"probe": int(probe), "index": int(index)}
        given = {name: cleaned[name] for name in EVIDENCE_FIELDS if cleaned[name]}
        return given or None

    def resolution_kwargs(self) -> dict:
        """The service's arguments: resolution, note, evidence, confirm_resend."""
        return {
            "resolution": self.cleaned_data["resolution"],
            "note": self.cleaned_data["note"],
            "evidence": self.evidence(),
            "confirm_resend": self.cleaned_data["confirm_resend"],
        }

    def problem(self) -> str:
        return (
            " ".join(str(error) for errors in self.errors.values() for error in errors)
            or "The form was incomplete."
        )
