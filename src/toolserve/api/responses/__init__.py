"""OpenAI's Responses API: routes, input and output items, MCP tools, the response store."""
