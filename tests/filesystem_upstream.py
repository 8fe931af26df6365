"""The reference MCP server @modelcontextprotocol/server-filesystem (from the npm registry,
installed by scripts/ensure-upstreams) as an upstream whose writes take arrays: a connector
file for it, serving one temporary folder."""

from __future__ import annotations

from pathlib import Path

FILESYSTEM_SERVER = str(
    Path(__file__).parent / "upstreams" / "node_modules" / ".bin" / "mcp-server-filesystem"
)


def filesystem_connector(root: Path) -> str:
    """Connector `files`: edit_file, whose edits are an array of objects, on files under root
    (the file is the target); the probe reads the file back."""
    return f"""
[connectors.files]
kind = "mcp"
description = "The reference filesystem server over stdio"
command = ["{FILESYSTEM_SERVER}", "{root}"]

[connectors.files.tools.edit]
upstream_tool = "edit_file"
contract_version = "v1"
effect_class = "not_retriable"
target_argument = "path"
target_schema = {{ type = "string", pattern = "^/.+$" }}
probe = {{ tool = "read_text_file", arguments = {{ path = "{{target}}" }} }}

[connectors.files.tools.edit.args_schema]
type = "object"
required = ["edits"]
additionalProperties = false

[connectors.files.tools.edit.args_schema.properties.edits]
type = "array"
minItems = 1
maxItems = 20

[connectors.files.tools.edit.args_schema.properties.edits.items]
type = "object"
properties.oldText = {{ type = "string", minLength = 1 }}
properties.newText = {{ type = "string" }}
required = ["oldText", "newText"]
additionalProperties = false
"""
