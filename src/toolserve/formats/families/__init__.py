"""One module per tool-call format id; each exposes `FORMAT`, a `Format` instance."""
