"""toolserve: a local, OpenAI-compatible LLM server whose tool calls just work."""

from toolserve._native import load_llama_first

__version__ = "0.1.0"

load_llama_first()  # before any of our modules imports numpy: see _native.py
