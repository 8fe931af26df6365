"""The MCP gateway: agents reach Countersign as an MCP server at /mcp/ (see http.py)."""
