"""A tool's plain sentence of what one intent will do, for the people who decide it.

A connector file's tool may declare `summary = "Charge {args.amount_cents|money:args.currency}
to {target}"`. In it, `{target}`, `{tool}` and `{args.NAME}` stand for the intent's values, and
`{args.NAME|money:args.CURRENCY}` (or `|money:EUR`, a fixed ISO 4217 code) writes an amount in
minor units as money: `12,500.00 EUR`, `1,250 JPY`, `1.250 KWD`. `{{` and `}}` are braces.

The sentence leads the card; the frozen arguments stay below it, whole. So it may shorten a
long value (`…`) but never invents one: an absent optional argument reads `(none)`, and an
amount that is not a whole number of minor units, or a currency that is not an ISO code, is
written as given with what it is, never rounded into a figure it is not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_PART = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")
_VALUE = re.compile(r"target|tool|args\.[A-Za-z0-9_-]+")
_CURRENCY = re.compile(r"[A-Z]{3}")
# ISO 4217 currencies whose minor unit is not the hundredth.
ZERO_DIGITS = frozenset(
    ("BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI"),
) | frozenset(("VND", "VUV", "XAF", "XOF", "XPF"))
THREE_DIGITS = frozenset(("BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"))
LONGEST_VALUE = 60
ABSENT = "(none)"


class SummaryError(ValueError):
    """A summary template that names what the intent will not have."""


def _pieces(template: str):
    """(literal text, placeholder or None) pairs, in order."""
    position = 0
    for match in _PART.finditer(template):
        text = template[position : match.start()]
        position = match.end()
        if match.group(1) is None:
            yield text + match.group(0)[0], None
        else:
            yield text, match.group(1)
    rest = template[position:]
    if "{" in rest or "}" in rest:
        raise SummaryError(f"unbalanced brace in {template!r} (write {{{{ or }}}})")
    yield rest, None


def _parse(placeholder: str) -> tuple[str, str | None, str | None]:
    """(value, filter, the filter's argument) of `{value|filter:argument}`."""
    value, _, filtered = placeholder.partition("|")
    name, _, argument = filtered.partition(":")
    return value.strip(), name.strip() or None, argument.strip() or None


def check(template: str, args_schema: Mapping[str, Any]) -> None:
    """Refuse a summary whose placeholders the intent will not have."""
    properties = args_schema.get("properties", {})

    def known(value: str) -> None:
        if not _VALUE.fullmatch(value):
            raise SummaryError(f"unknown placeholder {{{value}}} (target, tool or args.NAME)")
        if value.startswith("args.") and value[5:] not in properties:
            raise SummaryError(f"{{{value}}} names no argument of args_schema")

    for _, placeholder in _pieces(template):
        if placeholder is None:
            continue
        value, name, argument = _parse(placeholder)
        known(value)
        if name is None:
            continue
        if name != "money":
            raise SummaryError(f"unknown filter |{name} (known: money)")
        if argument is None:
            raise SummaryError("|money needs its currency: |money:args.currency or |money:EUR")
        if _CURRENCY.fullmatch(argument) is None:
            known(argument)


def money_fields(template: str) -> dict[str, str]:
    """The arguments the summary writes as money: name -> its currency (`args.NAME` or a
    fixed ISO code), so that a plan's totals add each currency apart."""
    found = {}
    for _, placeholder in _pieces(template):
        if placeholder is None:
            continue
        value, name, argument = _parse(placeholder)
        if name == "money" and argument is not None and value.startswith("args."):
            found[value[5:]] = argument
    return found


def currency_of(spec: str, args: Mapping[str, Any]) -> Any:
    """The currency a money field's spec names, for one intent's args."""
    return spec if _CURRENCY.fullmatch(spec) else args.get(spec[5:])


def money(amount: Any, currency: Any) -> str:
    """An amount in minor units as money, by its currency's minor unit."""
    if not isinstance(currency, str) or _CURRENCY.fullmatch(currency.upper()) is None:
        return f"{amount} in minor units of {currency!r} (not an ISO 4217 code)"
    currency = currency.upper()  # Stripe spells its codes in lower case
    if not isinstance(amount, int) or isinstance(amount, bool):
        return f"{amount!r} {currency} (not a whole number of minor units)"
    digits = 0 if currency in ZERO_DIGITS else 3 if currency in THREE_DIGITS else 2
    sign = "-" if amount < 0 else ""
    whole, minor = divmod(abs(amount), 10**digits)
    fraction = f".{minor:0{digits}d}" if digits else ""
    return f"{sign}{whole:,}{fraction} {currency}"


def _shortened(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= LONGEST_VALUE else text[: LONGEST_VALUE - 1] + "…"


def render(template: str, *, tool: str, target: str, args: Mapping[str, Any]) -> str:
    def value_of(name: str) -> Any:
        if name == "target":
            return target
        if name == "tool":
            return tool
        return args.get(name[5:], ABSENT)

    said = []
    for text, placeholder in _pieces(template):
        said.append(text)
        if placeholder is None:
            continue
        value, name, argument = _parse(placeholder)
        if name == "money" and argument is not None:
            said.append(money(value_of(value), currency_of(argument, args)))
        else:
            said.append(_shortened(value_of(value)))
    return "".join(said)
