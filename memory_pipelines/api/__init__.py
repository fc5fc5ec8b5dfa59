"""Serving memory to agents: API keys, the operations both servers offer (`service`), the
HTTP API (`http`) and the MCP server (`mcp_server`)."""
