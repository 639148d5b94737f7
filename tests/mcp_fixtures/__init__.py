"""Real MCP servers, written with the SDK's own server class, that the tests start."""
