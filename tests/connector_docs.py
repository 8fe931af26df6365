"""docs/CONNECTORS.md's examples, as the tests read them: its fenced blocks, each TOML
example's connector, and an example loaded with a value for every variable it names."""

from __future__ import annotations

import re
from pathlib import Path

from runs.tools.connectors.files import load_file

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "CONNECTORS.md"
VARIABLE = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def blocks(language: str, document: Path = DOC) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", document.read_text(), re.S | re.M)


def python_block(first_line: str) -> str:
    (source,) = [block for block in blocks("python") if block.startswith(first_line)]
    return source


def environment(text: str, directory: Path) -> dict[str, str]:
    """A value for every ${VAR} the example names: a URL, a file, or a secret."""
    values = {}
    for name in set(VARIABLE.findall(text)):
        if name.endswith("_URL"):
            values[name] = f"https://{name.lower().replace('_', '-')}.example/"
        elif name.endswith("_PATH"):
            values[name] = str(directory / name.lower())
        else:
            values[name] = f"secret-{name.lower()}"
    return values


def load(text: str, directory: Path, **variables: str) -> dict[tuple[str, str], object]:
    """The example's tools by (name, version); `variables` set some of its ${VAR}s."""
    path = directory / "example.toml"
    path.write_text(text)
    tools = load_file(str(path), environ={**environment(text, directory), **variables})
    return {(tool.name, tool.contract_version): tool for tool in tools}


def connector_of(text: str) -> str:
    return re.search(r"^\[connectors\.([a-z0-9_-]+)\]", text, re.M).group(1)


EXAMPLES = blocks("toml")
