"""toolserve: a local, OpenAI-compatible LLM server whose tool calls just work."""

__version__ = "0.1.0"
