"""`toolserve launch AGENT`: a coding agent (Codex CLI, Claude Code) run on toolserve in one
command. agents.py says what each agent needs, fit.py how large a context, files.py writes the
configuration, server.py starts or checks the server, command.py puts them together."""

from toolserve.launch.command import main

__all__ = ["main"]
