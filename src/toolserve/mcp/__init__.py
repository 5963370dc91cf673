"""MCP servers as tools of the Responses API: the `--mcp-config` file (`config.py`) and the
connections to servers through the official SDK (`client.py`). The Responses side (which tools a
request offers, its items and events, the loop of calls) is `api/responses/mcp.py`."""
