"""Text that could fool an operator: `ops@ex\u0430mple.com` (a Cyrillic `\u0430`) reads as
the real address. The inbox shows what such text really is, next to it.

Four signs, checked with `unicodedata` alone (no confusables table: a sign, not a proof):
- a character is invisible or reorders the text around it (format characters, category Cf:
  the bidirectional overrides and isolates U+202A-202E and U+2066-2069, zero-width U+200B-200F
  and U+2060-2064, U+FEFF, the soft hyphen U+00AD, ...) or is a control or line separator:
  `invoice\\u202efdp.exe` reads as `invoiceexe.pdf`. Such characters are also never shown
  raw: `shown` writes them as `\\u202e`, everywhere a page or a mail shows an agent's text;
- a word mixes letters of scripts that look alike (Latin, Cyrillic, Greek, ...);
- a character is a compatibility form of ASCII (fullwidth `\uff45`, mathematical bold
  `\U0001d41a`, script `\u2113`: NFKC makes them ASCII);
- a domain-like word (`label.label`) is not ASCII: its punycode is what resolves, and an
  all-Cyrillic `\u0441\u043e\u0441\u043e.com` mixes nothing yet is still not `coco.com`.
Non-ASCII words in one script (`Grüße`, `привет`, `東京`) are ordinary text and pass.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass

# Scripts with letters that pass for each other's; mixing others (Latin with Katakana, as in
# `Tシャツ`) is ordinary writing.
LOOKALIKE_SCRIPTS = frozenset({"LATIN", "CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE", "COPTIC"})
WORD = re.compile(r"[\w-]+")
DOMAIN_LIKE = re.compile(r"[\w-]+(?:\.[\w-]+)+")


# Cc: controls; Cf: format (bidi, zero-width, soft hyphen); Zl, Zp: line and paragraph
# separators; Co, Cn: private use and unassigned, which render as anything or nothing.
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Co", "Cn"})
HIDDEN_REASON = "has invisible or direction-changing characters (shown escaped)"
# A flagged run of text is shown up to this long around its first hidden character.
FLAG_CONTEXT = 40


def is_hidden(char: str) -> bool:
    return unicodedata.category(char) in HIDDEN_CATEGORIES


def escape_character(char: str) -> str:
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def shown(text: str, *, keep: str = "") -> str:
    """`text` with every hidden character written as its escape (`\\u202e`), so what a
    person reads is in the order it is stored; `keep` names controls that are layout here
    (the newlines of pretty-printed JSON)."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(
        escape_character(char) if is_hidden(char) and char not in keep else char for char in text
    )


_ESCAPE = re.compile(r"\\u([0-9a-f]{4})|\\U([0-9a-f]{8})")


def unshown(text: str) -> str:
    """The inverse of `shown` for what a person sends back (an edited argument): an escape
    of a hidden character becomes that character again; any other backslash stays text."""

    def character(match: re.Match) -> str:
        char = chr(int(match.group(1) or match.group(2), 16))
        return char if is_hidden(char) else match.group()

    return _ESCAPE.sub(character, text)


def quoted(text: str, *, limit: int) -> str:
    """Text an agent wrote, for a plain-text mail: one line between double quotes, with
    newlines, quotes, backslashes, controls and hidden characters escaped, and at most
    `limit` of its characters (the rest counted), so it can never pass for a line of ours."""
    inner = json.dumps(text[:limit], ensure_ascii=False)[1:-1]
    more = f" (and {len(text) - limit} more characters)" if len(text) > limit else ""
    return f'"{shown(inner)}"{more}'


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
    for start, flag in _hidden_flags(text):
        found.setdefault(flag.text, (start, flag))
    return [flag for _, flag in sorted(found.values(), key=lambda entry: entry[0])]


def _hidden_flags(text: str) -> list[tuple[int, Lookalike]]:
    """Each run of non-space text holding a hidden character, shown escaped; layout
    newlines and tabs are not hidden (a run never spans them: they are whitespace)."""
    flags = []
    for match in re.finditer(r"[^\t\n ]+", text):
        run = match.group()
        hidden = [index for index, char in enumerate(run) if is_hidden(char)]
        if not hidden:
            continue
        start = max(hidden[0] - FLAG_CONTEXT, 0)
        excerpt = run[start : hidden[0] + FLAG_CONTEXT]
        cut = len(run) > start + len(excerpt)
        excerpt = ("…" if start else "") + excerpt + ("…" if cut else "")
        points = tuple(dict.fromkeys(_code_point(run[index]) for index in hidden))
        flags.append((match.start(), Lookalike(shown(excerpt), HIDDEN_REASON, "", points)))
    return flags


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
    return tuple(_code_point(char) for char in seen)


def _code_point(char: str) -> str:
    return f"U+{ord(char):04X} {unicodedata.name(char, 'unnamed')}"


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
