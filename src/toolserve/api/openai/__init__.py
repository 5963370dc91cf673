"""OpenAI's chat completions, completions and embeddings."""
