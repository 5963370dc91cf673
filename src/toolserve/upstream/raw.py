"""Raw mode: toolserve renders the prompt (chat template + the family's format module), the
upstream only continues text on its /v1/completions, and toolserve parses what comes back
with the same OutputShaper the local path uses. So tool calls, reasoning and the streaming
contract are toolserve's own, for families the upstream cannot parse.

`response_format` reaches the upstream's guided decoding as the model's `guided` setting says:
`openai` sends `response_format` on the completion request (vLLM, SGLang, toolserve),
`vllm` adds vLLM's `structured_outputs` and older `guided_json`, `none` refuses with a 400.
Tool calls of the generic_json format are plain JSON, so `tool_choice` maps onto the same
guided JSON. With `vllm`, every other family's calls are constrained as on the local engine:
the family's own grammar (llguidance's Lark, which vLLM compiles with its guidance backend:
start it with `--structured-outputs-config.backend guidance`) goes upstream as
`structured_outputs.grammar`, for `required` and a named function, and in its
lazy form (free text until a call marker) for `auto`. The markers that are one token of the
upstream's vocabulary (asked once from its /tokenize) are written as that token or its text.
Without `vllm`, `required` / a named function are a 400 for those families.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from toolserve.config import UpstreamConfig
from toolserve.errors import InvalidRequest, ModelLoadError, Unsupported, UpstreamError
from toolserve.formats import constraint
from toolserve.formats.grammar import closed, generic_json_schema
from toolserve.formats.registry import detect_format, get_format
from toolserve.formats.template import ChatTemplate, bundled_template_source
from toolserve.serving.chat import ChatOptions, ChatRenderer, forced_calls
from toolserve.serving.conversation import ChatRequest, RemoteChat, ResponseSchema, Step, shape
from toolserve.serving.pipeline import Finish, Limits, Piece
from toolserve.types import SamplingParams, Usage
from toolserve.upstream.passthrough import Forwarding, Opened, _usage
from toolserve.upstream.template import model_template

Json = dict[str, Any]
Grammar = Callable[[Mapping[str, int]], str]  # the calls' grammar, given the markers that are one upstream token

log = logging.getLogger("toolserve.upstream")
# what vLLM says when its structured-output backend cannot take a Lark grammar (xgrammar, outlines, ...)
_GRAMMAR_REFUSED = ("grammar", "structured output", "structured_output")
# chat templates' end-of-turn markers: those the template writes and the upstream reads as one
# token may end an answer under a grammar (constraint.upstream_ends)
END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>", "<|return|>", "<|call|>",
               "<｜end▁of▁sentence｜>", "</s>", "<|endoftext|>")
GUIDANCE = ("start vLLM (0.10.2 or later) with --structured-outputs-config.backend guidance (an engine runs one "
            "structured-output backend, and under the default 'auto' the first structured request of its life picks it)")


def _refuses_grammar(exc: UpstreamError) -> bool:
    return exc.status == 400 and any(w in exc.message.lower() for w in _GRAMMAR_REFUSED)


class RawUpstream(Forwarding):
    mode = "raw"

    def __init__(self, cfg: UpstreamConfig, alias: str | None = None, limits: Limits | None = None, *,
                 offline: bool = False, token: str | None = None):
        """The chat template: `chat_template` (a file), else the model's own where its name is a
        directory here or a Hub repo id (else, at start, vLLM's `root` for it), else ChatML."""
        super().__init__(cfg, alias, limits)
        self._offline, self._token = offline, token
        self._tokens: dict[str, int] | None = None  # the family's markers that are one upstream token
        self._refused: str | None = None  # why the upstream refused a grammar (found at start)
        if cfg.chat_template:
            try:
                found: tuple[str, str] | None = (Path(cfg.chat_template).read_text("utf-8"), "file")
            except OSError as exc:
                raise ModelLoadError(f"cannot read chat template {cfg.chat_template}: {exc.strerror}") from exc
        else:
            found = model_template(cfg.upstream_model, offline=offline, token=token) if cfg.upstream_model else None
        self._use(*(found or (bundled_template_source("chatml"), "bundled:chatml")))

    def _use(self, source: str, label: str) -> None:
        # the upstream tokenizes the text and adds BOS itself: the template writes none
        self.template = ChatTemplate(source, label=label)
        fmt_id = self.cfg.tool_format if self.cfg.tool_format != "auto" else detect_format(source, None)
        self.fmt = get_format(fmt_id)
        self.renderer = ChatRenderer(self.template, self.fmt)
        self._tokens = None

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
        body, grammar = self.prepare(prompt, req.options, req.sampling, req.stops, req.response_schema, req.max_tokens)
        opened: Opened[httpx.Response] = Opened()

        async def open_first() -> None:
            opened.put(await self._open(body(0), grammar), httpx.Response.aclose)

        def steps(i: int) -> AsyncIterator[Step]:
            return shape(self._generate(body(i), grammar, opened.take(i)), self.renderer.shaper(prompt, req.options))

        return RemoteChat(prompt, steps, open_first)

    def prepare(
        self,
        prompt_text: str,
        opts: ChatOptions,
        params: SamplingParams,
        stops: Sequence[str],
        response_schema: ResponseSchema | None,
        max_tokens: int | None,
    ) -> tuple[Callable[[int], Json], Grammar | None]:
        """Check the request against what the upstream can do; each choice's completion body,
        and the calls' grammar to send with it."""
        if params.logprobs is not None:
            raise Unsupported(
                f"logprobs are not available for '{self.model_id}': it runs on an upstream server in raw mode, "
                "whose tokens toolserve does not see.",
                param="logprobs",
            )
        grammar = self._calls_grammar(prompt_text, opts) if response_schema is None else None
        body: Json = {
            "prompt": prompt_text,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": max_tokens,  # null: up to the end of the context (vLLM, llama.cpp, toolserve)
            "temperature": params.temperature,
            "top_p": params.top_p,
            "n": 1,
            "skip_special_tokens": False,  # vLLM, SGLang: the parser needs the family's markers
            **({} if grammar is not None else self._guided(opts, response_schema)),
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

        def seeded(i: int) -> Json:
            return body if params.seed is None else {**body, "seed": params.seed + i}

        return seeded, grammar

    def _calls_grammar(self, prompt_text: str, opts: ChatOptions) -> Grammar | None:
        """The family's grammar for the calls, where the upstream takes one (`guided: vllm`) and
        the request has tools: as on the local engine, `auto` lazily, and where a family has no
        lazy form the answer is left free (the parser returns only well-formed calls) unless a
        tool is strict. Written here, so what cannot be built is a 400 before anything is sent, with
        the markers the upstream reads as one token where they are known already."""
        if not opts.calls_allowed or self.cfg.guided != "vllm" or self.fmt.FORMAT_ID == "generic_json":
            return None
        if self._refused is not None:
            raise self._refusal(self._refused)
        thinking_open = self.renderer.thinking_open(prompt_text)
        fmt = self.fmt
        if opts.tool_choice == "auto":
            def grammar(tokens: Mapping[str, int]) -> str:
                return constraint.upstream_lazy(fmt, opts.tools, opts.parallel_tool_calls, thinking_open=thinking_open, specials=tokens)
        else:
            tools, parallel = forced_calls(opts)
            reasoning = self.renderer.may_reason(prompt_text)

            def grammar(tokens: Mapping[str, int]) -> str:
                return constraint.required(fmt, tools, parallel, thinking_open=thinking_open, reasoning=reasoning,
                                           specials=tokens, upstream=True).grammar
        known = dict(self._tokens or {})  # the markers, once asked (at start, where the upstream was up)
        try:
            text = grammar(known)
        except InvalidRequest as exc:
            if opts.tool_choice != "auto" or any(t.strict for t in opts.tools):
                raise
            log.info("tool calls left unconstrained under tool_choice auto: %s", exc.message)
            return None
        return lambda tokens: text if tokens == known else grammar(tokens)  # written again only if they were not known

    def _guided(self, opts: ChatOptions, response_schema: ResponseSchema | None) -> Json:
        if response_schema is not None:
            if opts.calls_allowed:
                raise Unsupported("response_format cannot be combined with tools yet; drop one of them.", param="response_format")
            kind, schema = response_schema
            return self._guided_json(kind, schema, "response_format")
        if not opts.calls_allowed:
            return {}
        if self.fmt.FORMAT_ID == "generic_json" and self.cfg.guided != "none":
            tools, parallel = forced_calls(opts)
            schema = generic_json_schema(tools, parallel, auto=opts.tool_choice == "auto")
            return self._guided_json("json_schema", schema, "tool_choice")
        if opts.tool_choice in ("required", "function"):
            what = "'required'" if opts.tool_choice == "required" else f"naming '{opts.tool_name}'"
            raise Unsupported(
                f"tool_choice {what} cannot be enforced for '{self.model_id}': it runs on an upstream server in raw "
                f"mode with guided '{self.cfg.guided}', and a JSON schema cannot express calls in the "
                f"'{self.fmt.FORMAT_ID}' format. Set the model's guided to 'vllm' (--upstream-guided vllm) for a vLLM "
                "upstream, which takes the family's grammar; or use tool_choice 'auto' or passthrough mode.",
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

    async def _open(self, body: Json, grammar: Grammar | None) -> httpx.Response:
        """The completion request sent, its answer's status read (a refusal raised here)."""
        if grammar is not None:
            tokens = await self.marker_tokens()
            ends = [tokens[m] for m in END_OF_TURN if m in tokens]
            body = {**body, "structured_outputs": {"grammar": constraint.upstream_ends(grammar(tokens), ends)}}
        try:
            return await self.client.open("/v1/completions", self.upstream_body(body))
        except UpstreamError as exc:
            if grammar is None:
                raise
            if _refuses_grammar(exc):
                raise self._refusal(exc.message) from None
            if exc.status >= 500:  # vLLM whose engine took another backend first fails on the grammar with a 500
                exc.message += f" (the request carried the tool calls' grammar: {GUIDANCE})"
            raise

    async def _generate(self, body: Json, grammar: Grammar | None, opened: httpx.Response | None = None) -> AsyncIterator[Piece | Finish]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        resp = opened if opened is not None else await self._open(body, grammar)
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

    async def start(self) -> None:
        await super().start()
        if self.template.label == "bundled:chatml" and not self.cfg.chat_template:
            # vLLM lists where it loaded the model from as `root` (a directory, or a repo id)
            root = next((m.get("root") for m in self.client.models if m["id"] == self.upstream_model), None)
            if isinstance(root, str) and root and root != self.cfg.upstream_model:
                found = await asyncio.to_thread(model_template, root, offline=self._offline, token=self._token)
                if found is not None:
                    self._use(*found)
        log.info("upstream %s, raw mode: chat template %s, tool format %s", self.model_id, self.template.label, self.fmt.FORMAT_ID)
        if self.cfg.guided == "vllm" and self.client.healthy:
            await self.check_grammar()

    async def check_grammar(self) -> None:
        """Whether the upstream takes a grammar (one token under a grammar of one word), so that a
        vLLM on a backend that cannot read Lark refuses a request before its stream starts."""
        plain = self.upstream_body({"prompt": "ok", "max_tokens": 1})
        try:
            await self._probe({**plain, "structured_outputs": {"grammar": f'{constraint.UPSTREAM}start: "ok"\n'}})
        except UpstreamError as exc:
            # a 500 under the grammar but none without it: vLLM's engine runs another backend
            # (the first structured request of its life picked xgrammar)
            if _refuses_grammar(exc) or (exc.status >= 500 and await self._probe(plain, quiet=True)):
                self._refused = exc.message
                log.warning("upstream %s refuses grammars: %s", self.model_id, exc.message)
            return
        except Exception as exc:  # down, or anything else: the requests will tell
            log.info("upstream %s: grammar check skipped: %s", self.model_id, exc)
            return
        await self.marker_tokens()

    async def _probe(self, body: Json, quiet: bool = False) -> bool:
        """One short completion; whether it was answered (`quiet`: errors are False)."""
        try:
            resp = await self.client.open("/v1/completions", body)
            await resp.aclose()
        except UpstreamError:
            if quiet:
                return False
            raise
        return True

    def _refusal(self, message: str) -> Unsupported:
        return Unsupported(
            f"The upstream of '{self.model_id}' refused the tool calls' grammar ({message.strip()[:300]}). "
            f"toolserve sends the family's grammar in llguidance's Lark dialect as structured_outputs.grammar: {GUIDANCE}; "
            "or set this model's guided to 'openai' (tool_choice 'auto' left unconstrained).",
            param="tool_choice",
        )

    async def marker_tokens(self) -> dict[str, int]:
        """The family's markers that the upstream's tokenizer reads as one token, by id, asked
        once from its /tokenize (vLLM: `prompt`, llama.cpp: `content`); {} where it has none
        (a marker is then written as text)."""
        if self._tokens is not None:
            return self._tokens
        found: dict[str, int] = {}
        g = self.fmt.GRAMMAR
        markers = {t.marker for t in g.triggers} | {t.close for t in g.triggers if t.close} | set(self.fmt.REASONING or ())
        if g.calls_wrap is not None:
            markers |= {*g.calls_wrap[0], g.calls_wrap[1]}
        markers |= {m for m in END_OF_TURN if m in self.template.source}
        for marker in sorted(m for m in markers if m):
            body = self.upstream_body({"prompt": marker, "content": marker, "add_special_tokens": False})
            try:
                resp = await self.client.any().http.post("/tokenize", json=body, timeout=10.0)
                tokens = resp.json().get("tokens") if resp.status_code == 200 else None
            except (httpx.HTTPError, ValueError, AttributeError):
                return {}  # not known this time: asked again next time
            if resp.status_code == 404:
                break  # no /tokenize: markers as text
            if isinstance(tokens, list) and len(tokens) == 1 and isinstance(tokens[0], int):
                found[marker] = tokens[0]
        self._tokens = found
        log.info("upstream %s: markers that are one token: %s", self.model_id, found or "none")
        return found
