"""Logical action ids Countersign derives itself, and the one check that reserves them.

A compensation is `undo-<id>` (runs.services.saga), an edit or an ask-again `<base>~N`
(runs.services.intents.derived_action_id). An agent may not propose either: it could
pre-empt the id a derived intent needs (the saga or the edit then fails on an intent
conflict) or dress its own write up as an undo or an operator's edit. Every edge that takes
an agent's id (the REST API's schemas, the MCP gateway, the proposal service itself) asks
`reserved_action_id_rule`, so none of them can drift from the others.

The check reads the id as a person would: after NFKC (a fullwidth u, U+FF55, or a
fullwidth 2, U+FF12) and with dash and tilde look-alikes mapped to `-` and `~` (`undo`, a
U+2010 hyphen and `x` reads as `undo-x` to an approver). The prefix is refused in any
case: `UNDO-` reads the same too.
"""

from __future__ import annotations

import re
import unicodedata

COMPENSATION_PREFIX = "undo-"

# Characters NFKC leaves alone that a reader takes for a hyphen or a tilde.
_DASHES = "\u00ad\u02d7\u058a\u05be\u1400\u1806\u2010\u2011\u2012\u2013\u2014\u2015\u2043"
_DASHES += "\u2212\u2e17\u2e1a\u2e3a\u2e3b\u301c\u30a0\ufe58\ufe63\uff0d"
_TILDES = "\u02dc\u2053\u223c\u223d\u301c\uff5e"
_READS_AS = str.maketrans({**dict.fromkeys(_DASHES, "-"), **dict.fromkeys(_TILDES, "~")})

_RESERVED = (
    (
        re.compile(re.escape(COMPENSATION_PREFIX), re.IGNORECASE),
        f"ids starting with {COMPENSATION_PREFIX!r} are reserved for compensations",
    ),
    (
        # \d: any script's digits, not only ASCII ones (an Arabic-Indic two reads as 2).
        re.compile(r".*~\d+\Z", re.DOTALL),
        "ids ending in '~' and digits are reserved for edited and re-asked intents",
    ),
)


def as_read(action_id: str) -> str:
    """The id as a person reads it: NFKC, then dash and tilde look-alikes as `-` and `~`."""
    return unicodedata.normalize("NFKC", action_id).translate(_READS_AS)


def reserved_action_id_rule(action_id: str) -> str | None:
    """The rule that reserves `action_id` for an intent Countersign derives, if one does."""
    read = as_read(action_id)
    return next((rule for pattern, rule in _RESERVED if pattern.match(read)), None)


def reserved_action_id_refusal(action_id: str) -> str | None:
    """The refusal an agent's reserved id gets, naming the rule; None when it is free."""
    rule = reserved_action_id_rule(action_id)
    return None if rule is None else f"action_id {action_id!r} is refused: {rule}"
