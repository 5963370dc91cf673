"""Chat templates: render a model's Jinja chat template safely.

Templates come from model files, so they are untrusted input: they run in Jinja's immutable
sandbox with only the helpers chat templates expect. A template is probed once at load for
what it can do (system role, strict alternation), and conversations are adapted to it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any

import jinja2
from jinja2 import meta
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from toolserve.errors import BrokenTemplate, TemplateError

# Bundled templates for GGUF files that carry none, keyed by `general.architecture`.
_BUNDLED_BY_ARCH = {"gemma3": "gemma3", "gemma3_text": "gemma3", "gemma2": "gemma3", "gemma": "gemma3"}
_FALLBACK = "chatml"


class _RaisedByTemplate(Exception):
    """The template called raise_exception(): the conversation is not acceptable to it."""


def _raise_exception(message: str) -> None:
    raise _RaisedByTemplate(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, **_: Any) -> str:
    # HF's tojson keeps non-ASCII text as is; Jinja's default escapes it and HTML characters.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def bundled_template_source(name: str) -> str:
    """Text of a template shipped with toolserve (`formats/templates/NAME.jinja`)."""
    return (resources.files("toolserve.formats") / "templates" / f"{name}.jinja").read_text("utf-8")


def tokenizer_config_template(config: Any, prefer: str = "default") -> str | None:
    """The `chat_template` of a `tokenizer_config.json` (parsed): a string, or of a list of named
    ones `prefer`, else the default one, else the first."""
    found = config.get("chat_template") if isinstance(config, dict) else None
    if isinstance(found, list):
        named = {t.get("name"): t.get("template") for t in found if isinstance(t, dict)}
        found = named.get(prefer) or named.get("default") or next(iter(named.values()), None)
    return found if isinstance(found, str) else None


def choose_template(
    gguf_template: str | None, architecture: str | None, override: str | None = None
) -> tuple[str, str]:
    """Pick the template source and a label saying where it came from."""
    if override is not None:
        return override, "file"
    if gguf_template:
        return gguf_template, "gguf"
    name = _BUNDLED_BY_ARCH.get(architecture or "", _FALLBACK)
    return bundled_template_source(name), f"bundled:{name}"


# Where an image goes in the text that reaches the engine. The engine swaps it for the model's
# own image tokens (begin/end markers and the image's embeddings).
MEDIA_MARKER = "<__media__>"

# What templates of vision models write for an `{"type": "image"}` part, most specific first:
# Qwen2-VL / Qwen2.5-VL, Gemma 3, Llama 4, Pixtral / Mistral, then LLaVA / SmolVLM / LFM2-VL.
# The engine adds the begin/end tokens itself, so the whole placeholder becomes one marker.
IMAGE_PLACEHOLDERS = (
    "<|vision_start|><|image_pad|><|vision_end|>",
    "<start_of_image>",
    "<|image|>",
    "[IMG]",
    "<image>",
)


@dataclass(frozen=True)
class TemplateCaps:
    supports_system: bool
    strict_alternation: bool
    image_placeholder: str | None = None  # the template renders image parts as this text
    supports_developer: bool = True  # a `developer` turn renders (else it is the system turn, as OpenAI defines it)


class ChatTemplate:
    """A compiled chat template plus what it can do."""

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "", label: str = ""):
        self.source = source
        self.label = label
        self.bos_token = bos_token
        self.eos_token = eos_token
        env = _environment()
        try:
            self._template = env.from_string(source)
            # a template that reads `tools` renders tool definitions itself
            self.supports_tools = "tools" in meta.find_undeclared_variables(env.parse(source))
        except jinja2.TemplateSyntaxError as exc:
            raise BrokenTemplate(f"chat template does not compile: {exc}") from exc
        self.caps = self._probe()

    def _try(self, messages: list[dict[str, Any]]) -> str | None:
        try:
            return self._raw_render(messages, add_generation_prompt=False, extra={})
        except Exception:
            return None

    def _probe(self) -> TemplateCaps:
        marker = "\u2063sys-probe\u2063"
        with_system = self._try([{"role": "system", "content": marker}, {"role": "user", "content": "u"}])
        supports_system = with_system is not None and marker in with_system
        with_developer = self._try([{"role": "developer", "content": marker}, {"role": "user", "content": "u"}])
        two_users = self._try([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
        text = "\u2063img-probe\u2063"
        with_image = self._try([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]) or ""
        placeholder = next((p for p in IMAGE_PLACEHOLDERS if p in with_image), None) if text in with_image else None
        return TemplateCaps(
            supports_system=supports_system, strict_alternation=two_users is None, image_placeholder=placeholder,
            supports_developer=with_developer is not None and marker in with_developer,
        )

    def _image_parts(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Messages whose text holds media markers, as content parts for a template that places
        images itself (its own placeholder is turned back into the marker after rendering)."""
        out = []
        for m in messages:
            content = m.get("content")
            if isinstance(content, str) and MEDIA_MARKER in content:
                parts: list[dict[str, Any]] = []
                for i, piece in enumerate(content.split(MEDIA_MARKER)):
                    if i:
                        parts.append({"type": "image"})
                    if piece:
                        parts.append({"type": "text", "text": piece})
                m = {**m, "content": parts}
            out.append(m)
        return out

    def _raw_render(
        self, messages: list[dict[str, Any]], *, add_generation_prompt: bool, extra: dict[str, Any]
    ) -> str:
        context = dict(extra)
        context.update(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
        )
        return self._template.render(**context)

    def adapt(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Fold system messages into the first user turn and merge same-role runs if needed."""
        out = [dict(m) for m in messages]
        if not self.caps.supports_developer:  # Codex sends its instructions as `developer`
            out = [{**m, "role": "system"} if m["role"] == "developer" else m for m in out]
            while len(out) > 1 and out[0]["role"] == out[1]["role"] == "system":
                out[:2] = [{**out[0], "content": f"{out[0]['content'] or ''}\n\n{out[1]['content'] or ''}"}]
        if not self.caps.supports_system:
            system = "\n\n".join(m["content"] or "" for m in out if m["role"] in ("system", "developer"))
            out = [m for m in out if m["role"] not in ("system", "developer")]
            if system:
                first_user = next((m for m in out if m["role"] == "user"), None)
                if first_user is None:
                    out.insert(0, {"role": "user", "content": system})
                else:
                    first_user["content"] = f"{system}\n\n{first_user['content'] or ''}"
        if self.caps.strict_alternation:
            merged: list[dict[str, Any]] = []
            for m in out:
                if merged and merged[-1]["role"] == m["role"] and not m.get("tool_calls"):
                    merged[-1]["content"] = f"{merged[-1]['content'] or ''}\n\n{m['content'] or ''}"
                else:
                    merged.append(m)
            out = merged
        return out

    def render(
        self,
        messages: list[dict[str, Any]],
        *,
        add_generation_prompt: bool = True,
        extra: dict[str, Any] | None = None,
    ) -> str:
        """Render a conversation; a template refusal is a 400, a template fault a 500."""
        try:
            adapted = self.adapt(messages)
            placeholder = self.caps.image_placeholder
            if placeholder is None or not any(MEDIA_MARKER in (m.get("content") or "") for m in adapted):
                return self._raw_render(adapted, add_generation_prompt=add_generation_prompt, extra=extra or {})
            text = self._raw_render(self._image_parts(adapted), add_generation_prompt=add_generation_prompt, extra=extra or {})
            return text.replace(placeholder, MEDIA_MARKER)
        except _RaisedByTemplate as exc:
            raise TemplateError(f"the chat template rejected the conversation: {exc}", param="messages") from exc
        except SecurityError as exc:
            raise BrokenTemplate(f"chat template tried an unsafe operation: {exc}") from exc
        except jinja2.TemplateError as exc:
            raise BrokenTemplate(f"chat template failed: {exc}") from exc
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            raise BrokenTemplate(f"chat template failed: {type(exc).__name__}") from exc  # its message may quote the request
