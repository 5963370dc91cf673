"""Ollama's API: /api/chat, /api/generate, embeddings and the model routes."""
