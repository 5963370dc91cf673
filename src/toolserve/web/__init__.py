"""The chat page served at / (api/web.py): plain HTML, CSS and JavaScript, no build step and no
third-party code."""
