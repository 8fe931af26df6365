"""The `python` kind: a class implementing the tool contract, for systems the declarative
kinds cannot describe (see docs/CONNECTORS.md).

    [connectors.billing]
    kind = "python"
    [connectors.billing.tools.invoice]
    class = "billing_connector.Invoice"   # a runs.tools.base.Tool subclass named billing.invoice
    options = { api_key = "${BILLING_KEY}" }   # keyword arguments of its constructor

The class declares everything else (contract version, effect class, schemas) itself; its
meaning, frozen per contract version, is Tool.definition().
"""

from __future__ import annotations

import importlib
from typing import Any

from runs.tools.base import Tool
from runs.tools.connectors.definition import ConnectorSpec
from runs.tools.connectors.fields import Fields


def connection(spec: ConnectorSpec, fields: Fields) -> Any:
    def build(label: str, tool_fields: Fields, raw: dict[str, Any]) -> Tool:
        path = tool_fields.string("class")
        options = tool_fields.table("options", None)
        module_name, _, class_name = path.rpartition(".")
        try:
            tool_class = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError, ValueError) as error:
            raise tool_fields.error("class", f"cannot be imported: {error}") from error
        if not isinstance(tool_class, type) or not issubclass(tool_class, Tool):
            raise tool_fields.error("class", f"{path} is not a runs.tools.base.Tool subclass")
        expected = f"{spec.name}.{label}"
        if getattr(tool_class, "name", None) != expected:
            raise tool_fields.error(
                "class", f"{path} is named {getattr(tool_class, 'name', None)!r}, not {expected!r}"
            )
        try:
            tool = tool_class(**(options.data if options is not None else {}))
        except TypeError as error:
            raise tool_fields.error("options", spec.secrets.scrub(str(error))) from error
        tool.shown_secrets = spec.secrets.shown
        return tool

    return build
