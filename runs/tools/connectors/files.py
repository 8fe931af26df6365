"""Loading connector files: TOML in, tools out (the format is runs.tools.connectors.definition's).

`${VAR}` anywhere expands from the environment when the file is loaded; a missing variable
is refused with its name and place. `$${` writes a literal `${`. A value that is one `${VAR}`
alone is a fields.FromVariable, which a typed field reads as its type. The expanded values are the
connector's secrets, scrubbed from every error its tools raise (definition.Secrets).
"""

from __future__ import annotations

import copy
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runs.tools.connectors import http_kind, mcp_kind, python_kind, smtp_kind
from runs.tools.connectors.definition import ConnectorSpec, KindBuilder, Secrets
from runs.tools.connectors.fields import ConnectorError, Fields, FromVariable, Where

_NAME = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_VARIABLE = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

KINDS: dict[str, KindBuilder] = {
    "http": http_kind.connection,
    "mcp": mcp_kind.connection,
    "python": python_kind.connection,
    "smtp": smtp_kind.connection,
}

# Calls one worker may have out at once to one connector (`concurrency`): each is a thread
# and a request. The kinds whose calls are independent requests; an mcp upstream is one
# session, a python class decides for itself (Tool.concurrency).
MAX_CONCURRENCY = 64
CONCURRENT_KINDS = ("http", "smtp")


def load_files(paths: list[str], *, environ: Mapping[str, str]) -> list[Any]:
    """Every tool the files define; ConnectorError at the first problem."""
    tools: list[Any] = []
    seen: dict[tuple[str, str], str] = {}
    for path in paths:
        for tool in load_file(path, environ=environ):
            other = seen.get((tool.name, tool.contract_version))
            if other is not None:
                raise ConnectorError(
                    Where(path, tool.connector),
                    f"{tool.name} {tool.contract_version} is defined twice (also in {other})",
                )
            seen[(tool.name, tool.contract_version)] = path
            tools.append(tool)
    return tools


def load_file(path: str, *, environ: Mapping[str, str]) -> list[Any]:
    where = Where(str(path))
    try:
        with Path(path).open("rb") as handle:
            document = tomllib.load(handle)
    except OSError as error:
        raise ConnectorError(where, f"cannot be read: {error.strerror or error}") from error
    except tomllib.TOMLDecodeError as error:
        raise ConnectorError(where, f"is not valid TOML: {error}") from error
    top = Fields(document, where)
    connectors = top.table("connectors")
    top.done()
    if not connectors.data:
        raise connectors.error(None, "defines no connector")
    tools: list[Any] = []
    for name in list(connectors.data):
        tools.extend(_load_connector(name, connectors.data[name], where, environ))
    return tools


def _load_connector(
    name: str, raw: Any, file_where: Where, environ: Mapping[str, str]
) -> list[Any]:
    where = Where(file_where.file, connector=name)
    if not _NAME.fullmatch(name):
        raise ConnectorError(where, "a connector name is lower case letters, digits, _ and -")
    secrets = Secrets()
    data = _expand(copy.deepcopy(raw), where, environ, secrets)
    fields = Fields(data, where)
    kind = fields.string("kind", choices=tuple(KINDS))
    spec = ConnectorSpec(
        name=name,
        kind=kind,
        file=file_where.file,
        description=fields.string("description", ""),
        secrets=secrets,
        concurrency=_concurrency(fields, kind),
    )
    tool_tables = fields.table("tools")
    build_tool = KINDS[kind](spec, fields)
    fields.done()
    if not tool_tables.data:
        raise tool_tables.error(None, "defines no tool")
    built = []
    for label in list(tool_tables.data):
        tool_where = Where(file_where.file, connector=name, tool=label)
        tool_fields = Fields(tool_tables.data[label], tool_where)
        built.append(build_tool(label, tool_fields, raw["tools"][label]))
        tool_fields.done()
    return built


def _concurrency(fields: Fields, kind: str) -> int:
    concurrency = fields.integer("concurrency", 1, minimum=1)
    if concurrency > MAX_CONCURRENCY:
        raise fields.error("concurrency", f"must be at most {MAX_CONCURRENCY}")
    if concurrency > 1 and kind not in CONCURRENT_KINDS:
        raise fields.error(
            "concurrency", f"only {' and '.join(CONCURRENT_KINDS)} connectors send calls at once"
        )
    return concurrency


def _expand(value: Any, where: Where, environ: Mapping[str, str], secrets: Secrets) -> Any:
    if isinstance(value, dict):
        return {key: _expand(item, where.at(key), environ, secrets) for key, item in value.items()}
    if isinstance(value, list):
        return [
            _expand(item, where.at(str(index)), environ, secrets)
            for index, item in enumerate(value)
        ]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        variable = match.group(1)
        if variable is None:
            return "${"
        if variable not in environ:
            raise ConnectorError(where, f"environment variable {variable} is not set")
        secrets.names[environ[variable]] = variable
        return environ[variable]

    whole = _VARIABLE.fullmatch(value)
    if whole is not None and whole.group(1) is not None:
        return FromVariable(substitute(whole), whole.group(1))
    return _VARIABLE.sub(substitute, value)
