"""llama-server's own routes: /infill, rerank, /tokenize and /detokenize."""
