"""Standing rules' patterns, matched in time linear in the text, never by backtracking.

Python's `re` backtracks: `(a+)+$` against "aaaa...!" takes time exponential in the text, and
a rule's pattern is matched against what an agent sends. So a pattern is parsed with
Python's own regex parser (the same syntax operators already write) and run here as a
Thompson NFA: the set of positions the pattern can be in advances one character at a time,
each character costing at most the size of the program, whatever the pattern. Transitions
already computed are cached per pattern, so a long text costs a dict lookup per character.

Refused at parse, with a message naming the construct: backreferences, lookaround,
conditional groups, possessive quantifiers and atomic groups (no linear-time form), word
boundaries, inline flags other than (?x), and programs over MAX_PROGRAM instructions
(counted repeats are expanded: `[0-9a-f]{32}` is 32 instructions). `^` and `\\A` mean the
start of the text, `$` and `\\Z` its end. A text longer than MAX_TEXT_CHARS never matches:
a rule then admits nothing and a person decides (fail closed).
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable

# The parser behind `re.compile` (Python 3.11+); private, so tests/runs/test_patterns.py
# pins what it returns for the constructs used here.
from re import _constants as sre
from re import _parser

MAX_PROGRAM = 2_000
MAX_TEXT_CHARS = 100_000
# A cache of (state set, character) -> state set per pattern, emptied when it fills.
MAX_CACHED_STEPS = 4_096

Predicate = Callable[[str], bool]
_ALLOWED_FLAGS = sre.SRE_FLAG_UNICODE | sre.SRE_FLAG_VERBOSE
_REFUSED = {
    sre.GROUPREF: "backreferences",
    sre.GROUPREF_EXISTS: "conditional groups",
    sre.ASSERT: "lookahead and lookbehind",
    sre.ASSERT_NOT: "lookahead and lookbehind",
    sre.POSSESSIVE_REPEAT: "possessive quantifiers",
    sre.ATOMIC_GROUP: "atomic groups",
}
_CATEGORIES: dict[object, Predicate] = {
    # Unicode semantics, as `re` has for str patterns.
    sre.CATEGORY_DIGIT: str.isdecimal,
    sre.CATEGORY_NOT_DIGIT: lambda ch: not ch.isdecimal(),
    sre.CATEGORY_SPACE: str.isspace,
    sre.CATEGORY_NOT_SPACE: lambda ch: not ch.isspace(),
    sre.CATEGORY_WORD: lambda ch: ch.isalnum() or ch == "_",
    sre.CATEGORY_NOT_WORD: lambda ch: not (ch.isalnum() or ch == "_"),
}
_FLAGS_REFUSED = "uses inline flags such as (?i), which standing rules do not support"
_BEGIN = {sre.AT_BEGINNING, sre.AT_BEGINNING_STRING}
_END = {sre.AT_END, sre.AT_END_STRING}


class PatternRefused(ValueError):
    """A pattern outside the linear-time subset, or not a regular expression at all."""


# Instructions: ("char", predicate) consumes one character; ("split", a, b) and ("jmp", a)
# branch without consuming; ("begin",) and ("end",) hold only at the text's start and end;
# ("match",) accepts.
Instruction = tuple


class _Compiler:
    def __init__(self) -> None:
        self.program: list[Instruction] = []

    def emit(self, instruction: Instruction) -> int:
        if len(self.program) >= MAX_PROGRAM:
            raise PatternRefused(
                f"is too large to match safely (over {MAX_PROGRAM} steps once its counted "
                "repeats are expanded)"
            )
        self.program.append(instruction)
        return len(self.program) - 1

    def sequence(self, items) -> None:
        for op, value in items:
            self.item(op, value)

    def item(self, op, value) -> None:
        if op in _REFUSED:
            raise PatternRefused(f"uses {_REFUSED[op]}, which standing rules do not support")
        if op is sre.LITERAL:
            self.emit(("char", functools.partial(operator.eq, chr(value))))
        elif op is sre.NOT_LITERAL:
            self.emit(("char", functools.partial(operator.ne, chr(value))))
        elif op is sre.ANY:
            self.emit(("char", lambda ch: ch != "\n"))
        elif op is sre.IN:
            self.emit(("char", _class(value)))
        elif op is sre.SUBPATTERN:
            _group, add_flags, del_flags, inner = value
            if add_flags or del_flags:
                raise PatternRefused(_FLAGS_REFUSED)
            self.sequence(inner)
        elif op is sre.BRANCH:
            self.branch(value[1])
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            self.repeat(*value)
        elif op is sre.AT:
            self.assertion(value)
        else:
            raise PatternRefused(f"uses {str(op).lower()}, which standing rules do not support")

    def branch(self, alternatives) -> None:
        jumps = []
        for index, alternative in enumerate(alternatives):
            if index < len(alternatives) - 1:
                split = self.emit(("split", 0, 0))
                self.sequence(alternative)
                jumps.append(self.emit(("jmp", 0)))
                self.program[split] = ("split", split + 1, len(self.program))
            else:
                self.sequence(alternative)
        for jump in jumps:
            self.program[jump] = ("jmp", len(self.program))

    def repeat(self, least: int, most, inner) -> None:
        # Greedy or lazy makes no difference to whether the whole text matches.
        for _ in range(least):
            self.sequence(inner)
        if most is sre.MAXREPEAT:
            split = self.emit(("split", 0, 0))
            self.sequence(inner)
            self.emit(("jmp", split))
            self.program[split] = ("split", split + 1, len(self.program))
            return
        splits = []
        for _ in range(most - least):
            splits.append(self.emit(("split", 0, 0)))
            self.sequence(inner)
        for split in splits:
            self.program[split] = ("split", split + 1, len(self.program))

    def assertion(self, where) -> None:
        if where in _BEGIN:
            self.emit(("begin",))
        elif where in _END:
            self.emit(("end",))
        else:
            raise PatternRefused("uses word boundaries (\\b, \\B), which rules do not support")


def _class(items) -> Predicate:
    negate = bool(items) and items[0][0] is sre.NEGATE
    tests: list[Predicate] = []
    for op, value in items[1:] if negate else items:
        if op is sre.LITERAL:
            tests.append(functools.partial(operator.eq, chr(value)))
        elif op is sre.RANGE:
            tests.append(lambda ch, lo=value[0], hi=value[1]: lo <= ord(ch) <= hi)
        elif op is sre.CATEGORY and value in _CATEGORIES:
            tests.append(_CATEGORIES[value])
        else:
            raise PatternRefused(f"uses {str(op).lower()} in a [...] class: not supported")
    if negate:
        return lambda ch: not any(test(ch) for test in tests)
    return lambda ch: any(test(ch) for test in tests)


class SafePattern:
    """A compiled pattern; `fullmatch(text)` says whether all of `text` matches it."""

    def __init__(self, source: str, program: list[Instruction]) -> None:
        self.source = source
        self._program = program
        self._start = self._closure((0,), at_start=True, at_end=False)
        self._steps: dict[tuple[frozenset[int], str], frozenset[int]] = {}

    def fullmatch(self, text: str) -> bool:
        if len(text) > MAX_TEXT_CHARS:
            return False
        states = self._start if text else self._closure((0,), at_start=True, at_end=True)
        for ch in text:
            if not states:
                return False
            states = self._step(states, ch)
        final = self._closure(states, at_start=not text, at_end=True)
        return any(self._program[pc][0] == "match" for pc in final)

    def _step(self, states: frozenset[int], ch: str) -> frozenset[int]:
        key = (states, ch)
        following = self._steps.get(key)
        if following is None:
            advanced = [pc + 1 for pc in states if self._consumes(pc, ch)]
            following = self._closure(advanced, at_start=False, at_end=False)
            if len(self._steps) >= MAX_CACHED_STEPS:
                self._steps.clear()
            self._steps[key] = following
        return following

    def _consumes(self, pc: int, ch: str) -> bool:
        instruction = self._program[pc]
        return instruction[0] == "char" and instruction[1](ch)

    def _closure(self, pcs, *, at_start: bool, at_end: bool) -> frozenset[int]:
        """The instructions reachable without consuming: characters to try, and `end`
        (kept while not at the end: it may hold once the text ends) and `match`."""
        seen: set[int] = set()
        kept: set[int] = set()
        stack = list(pcs)
        while stack:
            pc = stack.pop()
            if pc in seen:
                continue
            seen.add(pc)
            kind = self._program[pc][0]
            if kind == "jmp":
                stack.append(self._program[pc][1])
            elif kind == "split":
                stack.extend(self._program[pc][1:])
            elif kind == "begin":
                if at_start:
                    stack.append(pc + 1)
            elif kind == "end" and at_end:
                stack.append(pc + 1)
            else:
                kept.add(pc)
        return frozenset(kept)


@functools.lru_cache(maxsize=512)
def safe_pattern(source: str) -> SafePattern:
    """`source` compiled for linear-time matching; PatternRefused with the reason otherwise."""
    try:
        parsed = _parser.parse(source)
    except re.error as error:
        raise PatternRefused(f"is not a regular expression: {error}") from None
    if parsed.state.flags & ~_ALLOWED_FLAGS:
        raise PatternRefused(_FLAGS_REFUSED)
    compiler = _Compiler()
    compiler.sequence(parsed)
    compiler.emit(("match",))
    return SafePattern(source, compiler.program)


def refusal_of(patterns: dict[str, str]) -> str:
    """The first refusal among named patterns ({"target_pattern": ..., ...}), or "": what the
    policies page says of a stored rule that admits nothing because of it."""
    for name, pattern in patterns.items():
        try:
            safe_pattern(pattern)
        except PatternRefused as refused:
            return f"{name} {refused}"
    return ""
