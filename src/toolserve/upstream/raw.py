"""Raw mode: toolserve renders the prompt (chat template + the family's format module), the
upstream only continues text on its /v1/completions, and toolserve parses what comes back
with the same OutputShaper the local path uses. So tool calls, reasoning and the streaming
contract are toolserve's own, for families the upstream cannot parse.

`response_format` reaches the upstream's guided decoding as the model's `guided` setting says:
`openai` sends `response_format` on the completion request (vLLM, SGLang, toolserve),
`vllm` adds vLLM's `structured_outputs` and older `guided_json`, `none` refuses with a 400.
Tool calls of the generic_json format are plain JSON, so `tool_choice` maps onto the same
guided JSON; other formats have no portable way to force a call: `required` / a named
function is a 400 there.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from toolserve.config import UpstreamConfig
from toolserve.errors import ModelLoadError, Unsupported, UpstreamError
from toolserve.formats.grammar import closed, generic_json_schema
from toolserve.formats.registry import detect_format, get_format
from toolserve.formats.template import ChatTemplate, bundled_template_source
from toolserve.serving.chat import ChatOptions, ChatRenderer
from toolserve.serving.conversation import ChatRequest, RemoteChat, ResponseSchema, Step, shape
from toolserve.serving.pipeline import Finish, Limits, Piece
from toolserve.types import SamplingParams, Usage
from toolserve.upstream.passthrough import Forwarding, _usage

Json = dict[str, Any]
Choice = Callable[[int], AsyncIterator[Piece | Finish]]


class RawUpstream(Forwarding):
    mode = "raw"

    def __init__(self, cfg: UpstreamConfig, alias: str | None = None, limits: Limits | None = None):
        super().__init__(cfg, alias, limits)
        if cfg.chat_template:
            try:
                source, label = Path(cfg.chat_template).read_text("utf-8"), "file"
            except OSError as exc:
                raise ModelLoadError(f"cannot read chat template {cfg.chat_template}: {exc.strerror}") from exc
        else:
            source, label = bundled_template_source("chatml"), "bundled:chatml"
        # the upstream tokenizes the text and adds BOS itself: the template writes none
        self.template = ChatTemplate(source, label=label)
        fmt_id = cfg.tool_format if cfg.tool_format != "auto" else detect_format(source, None)
        self.fmt = get_format(fmt_id)
        self.renderer = ChatRenderer(self.template, self.fmt)

    def extra_card(self) -> dict[str, Any]:
        return {
            "chat_template": self.template.label,
            "template_renders_tools": self.template.supports_tools,
            "tool_format": self.fmt.FORMAT_ID,
            "guided": self.cfg.guided,
        }

    def start_chat(self, req: ChatRequest) -> RemoteChat:
        """A conversation's prompt rendered here, continued by the upstream, parsed here."""
        prompt = self.renderer.render(req.messages, req.options)
        choice = self.prepare(prompt, req.options, req.sampling, req.stops, req.response_schema, req.max_tokens)

        def steps(i: int) -> AsyncIterator[Step]:
            return shape(choice(i), self.renderer.shaper(prompt, req.options))

        return RemoteChat(prompt, steps)

    def prepare(
        self,
        prompt_text: str,
        opts: ChatOptions,
        params: SamplingParams,
        stops: Sequence[str],
        response_schema: ResponseSchema | None,
        max_tokens: int | None,
    ) -> Choice:
        """Check the request against what the upstream can do; the choices' generators."""
        if params.logprobs is not None:
            raise Unsupported(
                f"logprobs are not available for '{self.model_id}': it runs on an upstream server in raw mode, "
                "whose tokens toolserve does not see.",
                param="logprobs",
            )
        body: Json = {
            "prompt": prompt_text,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": max_tokens,  # null: up to the end of the context (vLLM, llama.cpp, toolserve)
            "temperature": params.temperature,
            "top_p": params.top_p,
            "n": 1,
            "skip_special_tokens": False,  # vLLM, SGLang: the parser needs the family's markers
            **self._guided(opts, response_schema),
        }
        optional = {
            "top_k": params.top_k or None,
            "min_p": params.min_p or None,
            "presence_penalty": params.presence_penalty or None,
            "frequency_penalty": params.frequency_penalty or None,
            "logit_bias": {str(k): v for k, v in params.logit_bias.items()} or None,
            "stop": list(stops) or None,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        if params.repetition_penalty != 1.0:
            body["repetition_penalty"] = body["repeat_penalty"] = params.repetition_penalty  # vLLM's and llama.cpp's names

        def choice(i: int) -> AsyncIterator[Piece | Finish]:
            seeded = body if params.seed is None else {**body, "seed": params.seed + i}
            return self._generate(seeded)

        return choice

    def _guided(self, opts: ChatOptions, response_schema: ResponseSchema | None) -> Json:
        if response_schema is not None:
            if opts.calls_allowed:
                raise Unsupported("response_format cannot be combined with tools yet; drop one of them.", param="response_format")
            kind, schema = response_schema
            return self._guided_json(kind, schema, "response_format")
        if not opts.calls_allowed:
            return {}
        if self.fmt.FORMAT_ID == "generic_json" and self.cfg.guided != "none":
            tools = [t for t in opts.tools if t.name == opts.tool_name] if opts.tool_choice == "function" else list(opts.tools)
            parallel = opts.parallel_tool_calls and opts.tool_choice != "function"
            schema = generic_json_schema(tools, parallel, auto=opts.tool_choice == "auto")
            return self._guided_json("json_schema", schema, "tool_choice")
        if opts.tool_choice in ("required", "function"):
            what = "'required'" if opts.tool_choice == "required" else f"naming '{opts.tool_name}'"
            raise Unsupported(
                f"tool_choice {what} cannot be enforced for '{self.model_id}': it runs on an upstream server in raw "
                f"mode, and an upstream's guided decoding takes a JSON schema, which cannot express calls in the "
                f"'{self.fmt.FORMAT_ID}' format. Use tool_choice 'auto', passthrough mode, or tool_format generic_json "
                "with guided decoding.",
                param="tool_choice",
            )
        return {}  # auto: unconstrained; the parser returns only well-formed calls

    def _guided_json(self, kind: str, schema: dict[str, Any] | None, param: str) -> Json:
        if self.cfg.guided == "none":
            raise Unsupported(
                f"{param} needs guided decoding, which the upstream of '{self.model_id}' is not set up for "
                "(guided: none).",
                param=param,
            )
        if kind == "json_object" or schema is None:
            out: Json = {"response_format": {"type": "json_object"}}
            if self.cfg.guided == "vllm":
                out["structured_outputs"] = {"json_object": True}
                out["guided_json"] = {"type": "object"}
            return out
        schema = closed(schema)  # as the local grammar does: no invented keys
        out = {"response_format": {"type": "json_schema", "json_schema": {"name": "response", "schema": schema, "strict": True}}}
        if self.cfg.guided == "vllm":
            out["structured_outputs"] = {"json": schema}  # vLLM 0.10.2 and later
            out["guided_json"] = schema  # before (removed in 0.12)
        return out

    async def _generate(self, body: Json) -> AsyncIterator[Piece | Finish]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        resp = await self.client.open("/v1/completions", self.upstream_body(body))
        first = last = None
        finish: str | None = None
        usage = None
        pieces = 0
        raw: list[str] = []  # the text as the upstream sent it (the upstream cut the stop strings)
        try:
            async for chunk in self.client.sse(resp):
                if chunk.get("usage"):
                    usage = _usage(chunk["usage"])
                for c in chunk.get("choices") or []:
                    if not isinstance(c, dict):
                        continue
                    text = c.get("text") or ""
                    if text:
                        last = loop.time()
                        first = first if first is not None else last
                        pieces += 1
                        raw.append(text)
                        yield Piece(text)
                    if c.get("finish_reason"):
                        finish = str(c["finish_reason"])
        finally:
            await resp.aclose()
        if finish is None:  # e.g. llama-cpp-python's server, whose stream ends empty when the prompt is too long
            raise UpstreamError("The upstream server ended its answer without finishing it (no finish_reason).")
        if usage is None:  # no usage chunk (llama-cpp-python): one piece per token there
            usage = Usage(0, pieces)
        done = Finish(
            finish or "stop", usage, None if first is None else first - started,
            0.0 if first is None else (last or first) - first, raw_text="".join(raw),
        )
        self.observe(done)
        yield done
