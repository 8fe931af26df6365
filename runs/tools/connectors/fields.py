"""Reading a connector file's tables with errors that say exactly where.

Every value a connector definition holds is read through `Fields`: typed, with its place in
the file (file, connector, tool, dotted field path) carried into `ConnectorError`, so
`manage.py connectors check` and a refused start point at the one line to fix.

A value that is one `${VAR}` and nothing else (`port = "${SMTP_PORT}"`) is a `FromVariable`:
where the field wants an integer, a number or true/false, the variable's text is read as
one (TOML's spelling: `8025`, `2.5`, `true`), and a text that is not one is refused naming
the variable, never its value (it may be a secret).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

_MISSING: Any = object()
_INTEGER = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_BOOLEANS = {"true": True, "false": False}
_KIND_WORDS = {bool: "true or false", int: "an integer", float: "a number"}


class FromVariable(str):
    """A field's whole value, as the environment variable `variable` gave it."""

    __slots__ = ("variable",)

    def __new__(cls, text: str, variable: str) -> FromVariable:
        value = super().__new__(cls, text)
        value.variable = variable
        return value


@dataclass(frozen=True)
class Where:
    """A place in a connector file."""

    file: str
    connector: str | None = None
    tool: str | None = None
    field: str | None = None

    def at(self, name: str) -> Where:
        return replace(self, field=f"{self.field}.{name}" if self.field else name)

    def __str__(self) -> str:
        parts = [self.file]
        if self.connector is not None:
            parts.append(f"connector {self.connector!r}")
        if self.tool is not None:
            parts.append(f"tool {self.tool!r}")
        if self.field is not None:
            parts.append(f"field {self.field!r}")
        return ", ".join(parts)


class ConnectorError(ValueError):
    """A connector definition that cannot be used, and where it is wrong."""

    def __init__(self, where: Where, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


class Fields:
    """One TOML table, read field by field; `done()` refuses any field nobody read."""

    def __init__(self, data: Any, where: Where) -> None:
        if not isinstance(data, dict):
            raise ConnectorError(where, "must be a table")
        self.data = data
        self.where = where
        self._read: set[str] = set()

    def error(self, name: str | None, message: str) -> ConnectorError:
        return ConnectorError(self.where.at(name) if name else self.where, message)

    def _get(self, name: str, default: Any) -> Any:
        self._read.add(name)
        if name in self.data:
            return self.data[name]
        if default is _MISSING:
            raise self.error(name, "is required")
        return default

    def has(self, name: str) -> bool:
        return name in self.data

    def raw(self, name: str, default: Any = _MISSING) -> Any:
        return self._get(name, default)

    def string(
        self, name: str, default: Any = _MISSING, *, choices: tuple[str, ...] | None = None
    ) -> Any:
        value = self._get(name, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, str) or not value:
            raise self.error(name, "must be a non-empty string")
        if choices is not None and value not in choices:
            raise self.error(name, f"must be one of {', '.join(choices)}, not {value!r}")
        return value

    def boolean(self, name: str, default: Any = _MISSING) -> Any:
        value = self._typed(name, default, bool)
        if not isinstance(value, bool):
            raise self.error(name, "must be true or false")
        return value

    def number(self, name: str, default: Any = _MISSING, *, minimum: float = 0) -> Any:
        value = self._typed(name, default, float)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
            raise self.error(name, f"must be a number >= {minimum}")
        return value

    def integer(self, name: str, default: Any = _MISSING, *, minimum: int = 0) -> Any:
        value = self._typed(name, default, int)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(name, f"must be an integer >= {minimum}")
        return value

    def _typed(self, name: str, default: Any, kind: type) -> Any:
        """The field's value; a whole `${VAR}` read as the bool, int or float wanted."""
        value = self._get(name, default)
        if not isinstance(value, FromVariable):
            return value
        parsed = _parsed(str(value), kind)
        if parsed is None:
            words = _KIND_WORDS[kind]
            raise self.error(name, f"must be {words}; ${{{value.variable}}} does not read as one")
        return parsed

    def strings(self, name: str, default: Any = _MISSING) -> Any:
        value = self._get(name, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self.error(name, "must be a list of strings")
        return value

    def table(self, name: str, default: Any = _MISSING) -> Any:
        value = self._get(name, default)
        if value is default and default is not _MISSING:
            return value
        return Fields(value, self.where.at(name))

    def string_map(self, name: str) -> dict[str, str]:
        """A table of strings (headers); empty when absent."""
        table = self.table(name, None)
        if table is None:
            return {}
        return {key: table.string(key) for key in list(table.data)}

    def done(self) -> None:
        unknown = sorted(set(self.data) - self._read)
        if unknown:
            raise self.error(unknown[0], "is not a known field here")


def _parsed(text: str, kind: type) -> bool | int | float | None:
    """text in TOML's spelling of a kind's value (a number may be an integer), or None."""
    if kind is bool:
        return _BOOLEANS.get(text)
    if _INTEGER.fullmatch(text):
        return int(text)
    if kind is float and _NUMBER.fullmatch(text) and math.isfinite(float(text)):
        return float(text)
    return None
