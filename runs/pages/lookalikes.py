"""Text that could fool an operator: `ops@ex\u0430mple.com` (a Cyrillic `\u0430`) reads as
the real address. The inbox shows what such text really is, next to it.

Three signs, checked with `unicodedata` alone (no confusables table: a sign, not a proof):
- a word mixes letters of scripts that look alike (Latin, Cyrillic, Greek, ...);
- a character is a compatibility form of ASCII (fullwidth `\uff45`, mathematical bold
  `\U0001d41a`, script `\u2113`: NFKC makes them ASCII);
- a domain-like word (`label.label`) is not ASCII: its punycode is what resolves, and an
  all-Cyrillic `\u0441\u043e\u0441\u043e.com` mixes nothing yet is still not `coco.com`.
Non-ASCII words in one script (`Grüße`, `привет`, `東京`) are ordinary text and pass.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# Scripts with letters that pass for each other's; mixing others (Latin with Katakana, as in
# `Tシャツ`) is ordinary writing.
LOOKALIKE_SCRIPTS = frozenset({"LATIN", "CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE", "COPTIC"})
WORD = re.compile(r"[\w-]+")
DOMAIN_LIKE = re.compile(r"[\w-]+(?:\.[\w-]+)+")


@dataclass(frozen=True)
class Lookalike:
    """One word as written, why it may deceive, and what it really is."""

    text: str
    why: str
    punycode: str
    code_points: tuple[str, ...]


def lookalikes(text: str) -> list[Lookalike]:
    """The words of `text` an operator could misread, each once, in order of appearance."""
    found: dict[str, tuple[int, Lookalike]] = {}
    domains = [match for match in DOMAIN_LIKE.finditer(text) if not match.group().isascii()]
    for match in domains:
        domain = match.group()
        flag = _flag(domain, ["is an internationalized domain"], _punycode(domain))
        found.setdefault(domain, (match.start(), flag))
    for match in WORD.finditer(text):
        word = match.group()
        inside_domain = any(d.start() <= match.start() < d.end() for d in domains)
        reasons = [] if word.isascii() or inside_domain else _word_reasons(word)
        if reasons:
            found.setdefault(word, (match.start(), _flag(word, reasons, "")))
    return [flag for _, flag in sorted(found.values(), key=lambda entry: entry[0])]


def _word_reasons(word: str) -> list[str]:
    reasons = []
    scripts = sorted({_script(char) for char in word} & LOOKALIKE_SCRIPTS)
    if len(scripts) > 1:
        reasons.append(f"mixes {' and '.join(script.title() for script in scripts)} letters")
    if any(_imitates_ascii(char) for char in word):
        reasons.append("has characters that imitate ASCII")
    return reasons


def _flag(text: str, reasons: list[str], punycode: str) -> Lookalike:
    # A domain is also checked as words: its mixed scripts are worth saying too.
    for word in WORD.findall(text):
        reasons += [reason for reason in _word_reasons(word) if reason not in reasons]
    return Lookalike(text, "; ".join(reasons), punycode, code_points(text))


def code_points(text: str) -> tuple[str, ...]:
    """Each distinct non-ASCII character as `U+0430 CYRILLIC SMALL LETTER A`."""
    seen = dict.fromkeys(char for char in text if not char.isascii())
    return tuple(f"U+{ord(char):04X} {unicodedata.name(char, 'unnamed')}" for char in seen)


def _script(char: str) -> str:
    if not char.isalpha():
        return ""
    return unicodedata.name(char, "").split(" ", 1)[0]


def _imitates_ascii(char: str) -> bool:
    if char.isascii():
        return False
    normal = unicodedata.normalize("NFKC", char)
    return normal.isascii() and normal.isprintable()


def _punycode(domain: str) -> str:
    try:
        return domain.encode("idna").decode("ascii")
    except UnicodeError:
        return ""  # not a valid name (a label too long, say): the code points still show
