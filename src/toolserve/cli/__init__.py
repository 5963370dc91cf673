"""`toolserve serve | chat | run | parse`: parse flags, build config, wire the layers."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from toolserve import __version__
from toolserve.config import (
    GUIDED_KINDS,
    KV_TYPE_NAMES,
    UPSTREAM_MODES,
    ConfigError,
    ModelConfig,
    ServerConfig,
    UpstreamConfig,
    env_default,
    field_names,
    load_models_config,
    parse_gpu_layers,
    parse_lora,
    parse_lora_model,
    parse_main_gpu,
    parse_model_map,
    parse_split_mode,
    parse_tensor_split,
)
from toolserve.errors import ToolserveError
from toolserve.serving.media import ImagePolicy
from toolserve.serving.pipeline import SAMPLING_DEFAULTS, Limits

if TYPE_CHECKING:
    from toolserve.serving.registry import ModelRegistry, UpstreamModel

Container = argparse._ActionsContainer  # a parser or one of its argument groups: where a flag is listed


# request caps: Limits fields, each a `serve` flag of the same name
CAPS = {
    "max_n": "choices per request ('n')",
    "max_messages": "messages per chat request",
    "max_tools": "tools per request",
    "max_stops": "stop strings per request",
    "max_top_logprobs": "top_logprobs (chat) / logprobs (completions)",
    "max_images": "image parts per request",
}


def _checked(parse: Callable[[object], object]) -> Callable[[str], object]:
    """An argparse type from a config parser: its message, not argparse's generic one."""

    def check(text: str) -> object:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return check


def _placement_flags(p: Container, d: ModelConfig) -> None:
    p.add_argument("--gpu-layers", "-ngl", type=_checked(parse_gpu_layers), default=env_default("gpu_layers", d.gpu_layers), help="layers on the GPU: a number, all, or auto (default: auto, all that fit; 0 where llama.cpp was built without a GPU backend)")
    p.add_argument("--main-gpu", type=_checked(parse_main_gpu), default=env_default("main_gpu", d.main_gpu), help="the GPU (index) of the whole model with --split-mode none")
    p.add_argument("--split-mode", type=_checked(parse_split_mode), default=env_default("split_mode", d.split_mode), help="how a model spreads over several GPUs: none (one GPU), layer (default: whole layers per GPU) or row (rows of each weight)")
    p.add_argument("--tensor-split", type=_checked(parse_tensor_split), default=env_default("tensor_split", d.tensor_split), help="each GPU's share of the model, e.g. 3,1 (default: in proportion to free memory)")
    p.add_argument("--no-kv-offload", action="store_true", default=env_default("no_kv_offload", d.no_kv_offload), help="keep the KV cache in RAM instead of on the GPU")


def _model_flags(p: Container, engine: Container | None = None) -> None:
    """What to load, on `p`; how it runs (threads, caches, GPU placement, the engine process)
    on `engine` (default: `p` too)."""
    d = ModelConfig()
    engine = p if engine is None else engine
    p.add_argument("--model", default=env_default("model", d.model), help="GGUF file or model reference: owner/repo[:QUANT] or hf://owner/repo/FILE.gguf (Hugging Face), ollama:NAME[:TAG], lmstudio:owner/repo[/FILE] (default: bundled SmolLM2-135M-Instruct)")
    p.add_argument("--model-alias", default=env_default("model_alias", d.model_alias), help="model id for clients (default: the reference's short name, or the file's stem)")
    _hub_flags(p)
    p.add_argument("--ctx-size", type=int, default=env_default("ctx_size", d.ctx_size), help="context length in tokens")
    p.add_argument("--chat-template", default=env_default("chat_template", d.chat_template), help="Jinja chat template file overriding the model's")
    p.add_argument("--tool-format", default=env_default("tool_format", d.tool_format), help="tool-call format id (default: auto, from the chat template)")
    p.add_argument("--mmproj", default=env_default("mmproj", d.mmproj), help="multimodal projector GGUF for images (default: a *mmproj*.gguf beside the model)")
    p.add_argument("--lora", metavar="PATH[:SCALE]", action="append", type=_checked(lambda text: parse_lora(str(text), "--lora")), default=[], help="apply a LoRA adapter GGUF to the model (scale default 1); repeatable")
    p.add_argument("--lora-model", dest="lora_models", metavar="NAME=PATH[:SCALE]", action="append", type=_checked(lambda text: parse_lora_model(str(text), "--lora-model")), default=[], help="also serve the model with this adapter as model NAME (the base weights are shared); repeatable")
    p.add_argument("--embeddings", action="store_true", default=env_default("embeddings", d.embeddings), help="also serve POST /v1/embeddings from this model (a llama context of its own; beside an engine process, on the file loaded again in the server)")
    engine.add_argument("--threads", type=int, default=env_default("threads", d.threads), help="CPU threads (default: all cores)")
    engine.add_argument("--parallel", type=int, default=env_default("parallel", d.parallel), help="requests decoded together, batched in one context, each with up to --ctx-size tokens (default: 0, auto: up to 8 while their KV cache fits 1 GiB, else 4 at 4096 tokens, fewer for longer contexts)")
    engine.add_argument("--cache-ram", type=int, default=env_default("cache_ram", d.cache_ram), help="MB of RAM for prompt-cache snapshots (0: off)")
    engine.add_argument("--cache-type-k", default=env_default("cache_type_k", d.cache_type_k), choices=sorted(KV_TYPE_NAMES), help="KV cache type for K")
    engine.add_argument("--cache-type-v", default=env_default("cache_type_v", d.cache_type_v), choices=sorted(KV_TYPE_NAMES), help="KV cache type for V (quantised types turn on flash attention)")
    engine.add_argument("--flash-attn", default=env_default("flash_attn", d.flash_attn), choices=["auto", "on", "off"], help="flash attention (default: auto, llama.cpp's choice; a quantised V cache needs it on)")
    engine.add_argument("--speculative", default=env_default("speculative", d.speculative), choices=["auto", "on", "off", "history"], help="speculative decoding from the prompt: draft tokens by n-gram lookup in each request's own context, verified in the same batch (default: auto, only where it pays: in a step with one decoding request, on the CPU each draft cut to what pays for its rows); history: as on, and also from earlier answers (faster for requests asked again, but the same greedy or seeded request may then answer differently at a near-tie); a request's `speculative` field overrides it")
    _placement_flags(engine, d)
    engine.add_argument("--no-repack", action="store_true", default=env_default("no_repack", d.no_repack), help="never repack weights into llama.cpp's extra buffer types (default: repack unless a check on this host finds it faults)")
    engine.add_argument("--engine-process", action=argparse.BooleanOptionalAction, default=env_default("engine_process", d.engine_process), help="run the model in an engine process of its own, restarted when it dies or hangs (default: on; --no-engine-process runs it in a thread of the server)")
    engine.add_argument("--engine-timeout", type=float, default=env_default("engine_timeout", d.engine_timeout), help="seconds an engine process may go without a step while requests run before it is killed and restarted")


def _log_flag(p: Container) -> None:
    p.add_argument("--log-level", default=env_default("log_level", ServerConfig.log_level), choices=["debug", "info", "warning", "error"], help="least important log lines shown (default: %(default)s)")


def _hub_flags(p: Container) -> None:
    p.add_argument("--offline", action="store_true", default=env_default("offline", False), help="use only models already on disk: nothing is downloaded (also HF_HUB_OFFLINE=1)")
    p.add_argument("--hf-token", metavar="TOKEN", default=env_default("hf_token", None), help="Hugging Face token for gated and private repos (default: HF_TOKEN, or the token `hf auth login` stored)")


def _model_config(args: argparse.Namespace) -> ModelConfig:
    """Every ModelConfig field is a flag of the same name (see _model_flags), but `origin`,
    which resolving a reference sets."""
    values = {name: getattr(args, name) for name in field_names(ModelConfig) if name != "origin"}
    values["lora"], values["lora_models"] = tuple(values["lora"] or ()), tuple(values["lora_models"] or ())
    return ModelConfig(**values)


def _upstream_flags(p: Container) -> None:
    d = UpstreamConfig(url="")
    p.add_argument("--config", metavar="FILE", default=env_default("config", None), help="YAML file listing several models, local and upstream (see docs/upstreams.md); replaces --model and --upstream")
    p.add_argument("--upstream", metavar="URL", default=env_default("upstream", None), help="serve a model of another OpenAI-compatible server (vLLM, SGLang, llama.cpp, toolserve) instead of a local GGUF; URL,URL,...: several servers of the same model (requests spread, prefix affinity, failover)")
    p.add_argument("--upstream-api-key", metavar="KEY", default=env_default("upstream_api_key", None), help="API key the upstream wants (sent as a Bearer token)")
    p.add_argument("--upstream-model", metavar="NAME", default=env_default("upstream_model", None), help="the upstream's model name (default: the first it lists); clients see --model-alias or this")
    p.add_argument("--upstream-mode", default=env_default("upstream_mode", d.mode), choices=UPSTREAM_MODES, help="passthrough: the upstream's chat endpoint, deltas repaired; raw: toolserve renders (--chat-template, --tool-format) and parses, the upstream completes text")
    p.add_argument("--upstream-guided", default=env_default("upstream_guided", d.guided), choices=GUIDED_KINDS, help="raw mode: how response_format reaches the upstream (openai: response_format; vllm: also structured_outputs/guided_json; none: refuse)")
    p.add_argument("--upstream-timeout", type=float, default=env_default("upstream_timeout", d.timeout), help="seconds to wait for the upstream's next bytes (504 after)")
    p.add_argument("--upstream-insecure", action="store_true", default=env_default("upstream_insecure", False), help="do not verify the upstream's TLS certificate")


SERVE_ABOUT = "toolserve serve: an OpenAI, Anthropic and Ollama-compatible server on one model or several; start with no flags for the bundled model"
SERVE_NOTE = "Most flags also take their default from the environment: TOOLSERVE_ and the flag's name in capitals, - as _ (TOOLSERVE_PORT=8080, TOOLSERVE_NO_WEB=1)."
SAMPLING_NOTE = "For requests that send none. Default: the model's own: its GGUF's general.sampling.* keys, its Ollama parameters, the bundled model's card; else, for a local model, toolserve's loop-ending repetition_penalty 1.1 and dry_multiplier 0.8; else the protocol's: temperature 1.0, the rest off."


def _serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`serve`'s flags in groups, in the order a reader looks for them (parsing is as flat)."""
    serve = sub.add_parser("serve", help="serve a model over HTTP: OpenAI chat completions and Responses, Anthropic Messages, Ollama", usage="%(prog)s [FLAG ...]", description=SERVE_ABOUT, epilog=SERVE_NOTE)
    model = serve.add_argument_group("model", "what to load: the model, its template and adapters, embedding and rerank models beside it")
    server = serve.add_argument_group("server and security", "where it listens, who may call, what requests may fetch, what it logs")
    limits = serve.add_argument_group("limits", "the largest requests accepted, and how many may wait")
    engine = serve.add_argument_group("engine and memory", "threads, batching, caches, GPU placement, the engine process")
    sampling = serve.add_argument_group("sampling defaults", SAMPLING_NOTE)
    upstream = serve.add_argument_group("upstream", "several models from a file, or a model of another OpenAI-compatible server")
    mcp = serve.add_argument_group("MCP", "MCP servers as tools of the Responses API")
    _model_flags(model, engine)
    model.add_argument("--embedding-model", metavar="PATH|REFERENCE", action="append", default=[m for m in [env_default("embedding_model", None)] if m], help="an embedding GGUF (BERT-like, pooling in its header) served for /v1/embeddings only, as the id of its file stem; repeatable")
    model.add_argument("--rerank-model", metavar="PATH|REFERENCE", action="append", default=[m for m in [env_default("rerank_model", None)] if m], help="a reranker GGUF (bge-reranker, Qwen3-Reranker, jina-reranker: a classification head) served for /v1/rerank only, as the id of its file stem; repeatable")
    server.add_argument("--host", default=env_default("host", ServerConfig.host), help="address to listen on (default: %(default)s)")
    server.add_argument("--port", type=int, default=env_default("port", ServerConfig.port), help="port to listen on (default: %(default)s)")
    server.add_argument("--api-key", default=env_default("api_key", ServerConfig.api_key), help="require 'Authorization: Bearer KEY' (or 'x-api-key: KEY') on /v1 routes")
    server.add_argument("--cors-origins", default=env_default("cors_origins", ServerConfig.cors_origins), help="comma-separated allowed browser origins (default: localhost pages only)")
    server.add_argument("--model-map", metavar="PATTERN=ID", action="append", default=[m for m in [env_default("model_map", None)] if m], help="serve requests for model names matching PATTERN (fnmatch, e.g. 'claude-*') with model ID; repeatable")
    server.add_argument("--no-web", action="store_true", default=env_default("no_web", False), help="do not serve the chat page at /")
    server.add_argument("--allow-image-urls", action="store_true", default=env_default("allow_image_urls", False), help="fetch http(s) image URLs in requests (public addresses only)")
    server.add_argument("--allow-private-urls", action="store_true", default=env_default("allow_private_urls", False), help="with --allow-image-urls or --allow-mcp: also loopback and private addresses")
    server.add_argument("--allow-image-files", metavar="DIR", default=env_default("allow_image_files", None), help="read image files named in requests, only under DIR")
    _log_flag(server)
    server.add_argument("--log-prompts", action="store_true", default=env_default("log_prompts", False), help="log each rendered prompt (off: logs never hold prompt text)")
    server.add_argument("--shutdown-grace", type=float, default=env_default("shutdown_grace", ServerConfig.shutdown_grace), help="seconds in-flight requests get to finish on SIGTERM/SIGINT")
    for cap, what in CAPS.items():
        limits.add_argument("--" + cap.replace("_", "-"), type=int, default=env_default(cap, getattr(Limits, cap)), help=f"largest {what} accepted")
    limits.add_argument("--max-image-mb", type=int, default=env_default("max_image_mb", ImagePolicy.max_bytes // 2**20), help="largest encoded image accepted")
    limits.add_argument("--max-image-pixels", type=int, default=env_default("max_image_pixels", ImagePolicy.max_pixels), help="largest image (width x height) accepted")
    limits.add_argument("--max-body-mb", type=int, default=env_default("max_body_mb", ServerConfig.max_body_mb), help="largest request body accepted")
    limits.add_argument("--max-queue", type=int, default=env_default("max_queue", Limits.max_queue), help="requests that may wait behind the running one; more get 429")
    limits.add_argument("--request-timeout", type=float, default=env_default("request_timeout", 0.0), help="seconds a request may take in all (0: no limit)")
    engine.add_argument("--no-core-shares", action="store_true", default=env_default("no_core_shares", False), help="local engines (models, embeddings) busy at once keep all their threads even when those add up to more than the cores (by default they share the cores)")
    for name in SAMPLING_DEFAULTS:
        kind = int if name == "top_k" else float
        flags = ["--" + name.replace("_", "-"), *(["--repeat-penalty"] if name == "repetition_penalty" else [])]  # llama.cpp's name too
        sampling.add_argument(*flags, dest=name, type=kind, default=env_default(name, None), help=f"{name} for requests that send none (default: see above)")
    sampling.add_argument("--no-loop-guard", action="store_true", default=env_default("no_loop_guard", False), help="let an answer that has become one short span repeated run on to max_tokens (default: it ends there, finish_reason length; a request's loop_guard: false does the same for one request)")
    _upstream_flags(upstream)
    mcp.add_argument("--mcp-config", metavar="FILE", default=env_default("mcp_config", None), help="MCP servers (the mcpServers JSON of Claude Desktop, Cursor, LM Studio) a Responses request may name by label; stdio servers start only from here")
    mcp.add_argument("--allow-mcp", action="store_true", default=env_default("allow_mcp", False), help="connect to MCP servers that Responses requests name by server_url (public addresses only unless --allow-private-urls)")
    mcp.add_argument("--mcp-timeout", type=float, default=env_default("mcp_timeout", 30.0), help="seconds one MCP operation (connect, list tools, a call) may take")
    mcp.add_argument("--mcp-max-output", type=int, default=env_default("mcp_max_output", 100_000), help="characters of an MCP call's output the model reads (the rest is cut)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toolserve", description="A local OpenAI-compatible LLM server.")
    parser.add_argument("--version", action="version", version=f"toolserve {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    chat = sub.add_parser("chat", help="chat with the model in the terminal")
    _model_flags(chat.add_argument_group("model"), chat.add_argument_group("engine and memory"))
    _log_flag(chat)
    chat.add_argument("--system", default=None, help="system prompt")
    chat.add_argument("--max-tokens", type=int, default=512)
    chat.add_argument("--temperature", type=float, default=None, help="default: the model's own (its GGUF's general.sampling.temp), else 1.0")
    run = sub.add_parser("run", help="answer one prompt on stdout")
    _model_flags(run.add_argument_group("model"), run.add_argument_group("engine and memory"))
    _log_flag(run)
    run.add_argument("prompt")
    run.add_argument("--system", default=None, help="system prompt")
    run.add_argument("--max-tokens", type=int, default=512)
    run.add_argument("--temperature", type=float, default=0.0)
    run.add_argument("--seed", type=int, default=None)
    sub.add_parser("parse", help="parse model output in a tool-call format (see --help)", add_help=False)
    sub.add_parser("launch", help="run Codex CLI or Claude Code on toolserve (see --help)", add_help=False)
    from toolserve.models.commands import add_commands

    add_commands(sub, _hub_flags)
    return parser


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP, not 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on sockets
    # that say so, and with it on every small write after the first on a kept-alive connection
    # (a response, an SSE chunk) waited for the client's delayed ACK, about 40 ms
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ToolserveError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    return sock


def _core_shares(args: argparse.Namespace) -> None:
    """Before any engine starts: the local engines this server may run at once (its models,
    their --embeddings contexts, --embedding-model) share the cores while busy together when
    their threads add up to more than the cores (engine/cores.py)."""
    from toolserve.engine import cores

    if args.no_core_shares:
        return
    models: list[ModelConfig] = []
    if args.config:
        try:
            models = [e.local for e in load_models_config(args.config, _model_config(args)).models if e.local is not None]
        except ConfigError:
            return  # _registry reports it
    elif not args.upstream:
        models = [_model_config(args)]
    threads = []
    for m in models:
        threads += [cores.threads(m.threads)] * (2 if m.embeddings else 1)
    threads += [cores.threads(args.threads)] * (len(args.embedding_model) + len(args.rerank_model))
    cores.prepare(threads)


def _serve(args: argparse.Namespace) -> int:
    _core_shares(args)
    import uvicorn

    from toolserve.api.app import create_app
    from toolserve.api.guard import GuardSettings, is_loopback

    sock = _bind(args.host, args.port)  # before loading: a busy port fails fast
    from toolserve.mcp.client import McpPolicy, from_flags

    mcp = from_flags(args.mcp_config, McpPolicy(args.allow_mcp, args.allow_private_urls, args.mcp_timeout, args.mcp_max_output))
    limits = Limits(
        max_queue=args.max_queue,
        request_timeout=args.request_timeout or None,
        **{cap: getattr(args, cap) for cap in CAPS},
        sampling_defaults={k: getattr(args, k) for k in SAMPLING_DEFAULTS if getattr(args, k) is not None},
        loop_guard=not args.no_loop_guard,
        images=ImagePolicy(
            allow_urls=args.allow_image_urls,
            allow_private_urls=args.allow_private_urls,
            files_dir=Path(args.allow_image_files) if args.allow_image_files else None,
            max_bytes=args.max_image_mb * 2**20,
            max_pixels=args.max_image_pixels,
        ),
    )
    from toolserve.models.resolve import resolve
    from toolserve.serving.rerank import check_reranker
    from toolserve.serving.side_models import embedding_models, rerank_models

    # a wrong path or reference fails (and a reference is fetched) before the chat model loads
    embedding = [resolve(spec, offline=args.offline, token=args.hf_token) for spec in args.embedding_model]
    ranking = [resolve(spec, offline=args.offline, token=args.hf_token) for spec in args.rerank_model]
    for got in ranking:
        check_reranker(str(got.path))
    registry = _models(args, limits)
    embedders = embedding_models(args, embedding, registry.ids())
    rerankers = rerank_models(args, ranking, [*registry.ids(), *(m.id for m in embedders)])
    origins = [o.strip() for o in (args.cors_origins or "").split(",") if o.strip()]
    guard = GuardSettings(
        api_key=args.api_key or None,
        max_body_bytes=args.max_body_mb * 1024 * 1024,
        loopback_only=is_loopback(args.host),
        origins=tuple(origins),
    )
    faults = os.environ.get("TOOLSERVE_TEST_FAULTS") == "1"  # test-only: POST /debug/engine-fault
    app = create_app(registry, guard, origins, log_prompts=args.log_prompts, web=not args.no_web, embedding_models=embedders, rerank_models=rerankers, test_faults=faults, mcp=mcp)
    grace = args.shutdown_grace
    # uvicorn waits for open connections up to its own timeout; ours aborts generations first,
    # so every stream still gets a final error event before the connection closes
    # the access log is the Guard's (api/guard.py): its path has no query string, where a client may put a key
    config = uvicorn.Config(app, log_level=args.log_level, timeout_graceful_shutdown=int(grace) + 5, access_log=False)

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: object) -> None:
            if not self.should_exit:
                registry.drain(grace)
            super().handle_exit(sig, frame)  # type: ignore[arg-type]
            # uvicorn re-raises the signal after a graceful stop; a finished drain exits 0
            getattr(self, "_captured_signals", []).clear()

    for line in startup_lines(args, registry.ids(), [m.id for m in embedders], [m.id for m in rerankers]):
        print(line, file=sys.stderr, flush=True)
    try:
        Server(config).run(sockets=[sock])
    finally:
        registry.close()
        for e in [*(m.embedder for m in embedders), *(m.embedder for m in rerankers)]:
            e.close()
    return 0


def startup_lines(args: argparse.Namespace, chat: Sequence[str], embedding: Sequence[str], rerank: Sequence[str]) -> list[str]:
    """What `serve` says once loaded: the models, and the address of each protocol and the page."""
    names = [*(chat or ["the upstream's model"]), *(f"{m} (embeddings)" for m in embedding), *(f"{m} (rerank)" for m in rerank)]
    what = f"{'models' if len(names) > 1 else 'model'} {', '.join(names)}" if chat else ", ".join(names)
    root = f"http://{f'[{args.host}]' if ':' in args.host else args.host}:{args.port}"
    rows = [("OpenAI API", "/v1"), ("Anthropic API", "/v1/messages"), ("Ollama API", "/api"), *([("chat page", "/")] if not args.no_web else [])]
    key = " (API key required)" if args.api_key else ""
    return [f"toolserve: serving {what} on {root}{key}", *(f"toolserve:   {name:<13}  {root}{path}" for name, path in rows)]


def _upstream_model(cfg: UpstreamConfig, alias: str | None, limits: Limits, args: argparse.Namespace) -> UpstreamModel:
    from toolserve.upstream.passthrough import Passthrough
    from toolserve.upstream.raw import RawUpstream

    if cfg.mode == "raw":  # its chat template may come from the Hub, as models by name do
        return RawUpstream(cfg, alias, limits, offline=args.offline, token=args.hf_token)
    return Passthrough(cfg, alias, limits)


def _models(args: argparse.Namespace, limits: Limits) -> ModelRegistry:
    """The models to serve: a --config file, an --upstream, or one local model loaded now."""
    try:
        flags = parse_model_map(args.model_map)
    except ConfigError as exc:
        raise ToolserveError(str(exc)) from None
    registry = _registry(args, limits)
    registry.model_map = [*flags, *registry.model_map]  # the flags first: they override the file
    for pattern, target in registry.model_map:
        if registry.ids() and target not in registry.ids():
            raise ToolserveError(f"--model-map {pattern}={target}: '{target}' is not served here (serving {', '.join(registry.ids())})")
    return registry


def _registry(args: argparse.Namespace, limits: Limits) -> ModelRegistry:
    from toolserve.serving.loader import load_pipeline
    from toolserve.serving.registry import LocalModel, ModelRegistry

    if args.config:
        given = [
            flag
            for flag, value in (("--model", args.model), ("--model-alias", args.model_alias), ("--upstream", args.upstream), ("--lora", args.lora), ("--lora-model", args.lora_models))
            if value
        ]
        if given:
            raise ToolserveError(f"--config lists the models; drop {' and '.join(given)}")
        try:
            mc = load_models_config(args.config, _model_config(args))
        except ConfigError as exc:
            raise ToolserveError(str(exc)) from None
        from toolserve.models.resolve import resolve_entries

        mc = resolve_entries(mc, args.config, offline=args.offline, token=args.hf_token)
        local = [LocalModel(e.id, e.local, keep_alive=e.keep_alive, preload=e.preload) for e in mc.models if e.local is not None]
        remote = [_upstream_model(e.upstream, e.id, limits, args) for e in mc.models if e.upstream is not None]
        registry = ModelRegistry(local, remote, default=mc.default, memory_mb=mc.memory_mb, limits=limits, model_map=mc.model_map)
        registry.preload()
        return registry
    if args.upstream:
        if args.model:
            raise ToolserveError("--model and --upstream are exclusive: a model is local or upstream")
        urls = [u.strip() for u in args.upstream.split(",") if u.strip()]
        for url in urls or [args.upstream]:
            if not url.startswith(("http://", "https://")):
                raise ToolserveError(f"--upstream {url!r} is not an http:// or https:// URL")
        if len(set(urls)) < len(urls):
            raise ToolserveError("--upstream lists a URL twice")
        cfg = UpstreamConfig(
            url=urls[0],
            replicas=tuple(urls[1:]),
            api_key=args.upstream_api_key or None,
            upstream_model=args.upstream_model or None,
            mode=args.upstream_mode,
            guided=args.upstream_guided,
            timeout=args.upstream_timeout,
            verify_tls=not args.upstream_insecure,
            chat_template=args.chat_template,
            tool_format=args.tool_format,
        )
        return ModelRegistry([], [_upstream_model(cfg, args.model_alias, limits, args)], limits=limits)
    one = _resolved(args)
    return ModelRegistry.single(load_pipeline(one, limits), one)


def _resolved(args: argparse.Namespace) -> ModelConfig:
    """The flags' model, a reference resolved to its files (fetched now if it must be)."""
    from toolserve.models.resolve import resolve_config

    return resolve_config(_model_config(args), offline=args.offline, token=args.hf_token)


def _run(args: argparse.Namespace) -> int:
    from toolserve.cli.prompt import run

    return run(args, _resolved(args))


def _chat(args: argparse.Namespace) -> int:
    from toolserve.cli.prompt import chat

    return chat(args, _resolved(args))


def greeting(parser: argparse.ArgumentParser) -> str:
    """What `toolserve` alone prints: each command in a line, and the first one to try."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    rows = [(a.dest, a.help or "") for a in sub._choices_actions]
    width = max(len(name) for name, _ in rows)
    lines = [f"  {name.ljust(width)}  {text}" for name, text in rows]
    return ("toolserve: a local OpenAI-compatible LLM server whose tool calls just work.\n\ncommands:\n"
            + "\n".join(lines) + "\n\nstart here: toolserve serve   (the bundled model on http://127.0.0.1:8000/v1)\n"
            "more: toolserve COMMAND --help\n")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(greeting(build_parser()), end="")
        return 0
    if argv[:1] in (["parse"], ["launch"]):  # their own parsers: what they take is not serve's
        import importlib
        return int(importlib.import_module({"parse": "toolserve.formats.parse_cli", "launch": "toolserve.launch"}[argv[0]]).main(argv[1:]))
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.log_level != "debug":  # httpx logs each upstream request at INFO: toolserve.access has the client's
        logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        if args.command in ("pull", "models", "rm"):
            return int(args.run(args))
        return {"serve": _serve, "run": _run, "chat": _chat}[args.command](args)
    except ToolserveError as exc:
        print(f"toolserve: error: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130

