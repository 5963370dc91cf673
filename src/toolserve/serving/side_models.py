"""The models served beside the chat models: embedding models (`--embedding-model`) and
rerankers (`--rerank-model`), each loaded at start into an `Embedder` of its own."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from toolserve.errors import ToolserveError

if TYPE_CHECKING:
    from toolserve.models.resolve import Resolved
    from toolserve.serving.embeddings import EmbeddingModel
    from toolserve.serving.rerank import RerankModel


def _repack(args: argparse.Namespace, first: str) -> bool:
    """Whether an embedding or rerank model may repack weights: the host check on the bundled
    model, as for generation models (serving/loader.py), else on `first`."""
    from toolserve.engine.repack import decide_repack
    from toolserve.errors import ModelLoadError
    from toolserve.models.files import bundled_model, check_gguf

    try:
        probe = str(bundled_model())
    except ModelLoadError:
        probe = str(check_gguf(first))
    return decide_repack(args.no_repack, probe)


def rerank_models(args: argparse.Namespace, files: list[Resolved], taken: list[str]) -> list[RerankModel]:
    """--rerank-model PATH or reference: each loaded now with llama.cpp's rank pooling, its id
    the file's stem (or the reference's short name)."""
    import llama_cpp

    from toolserve.engine.embed import Embedder
    from toolserve.models.refs import model_stem
    from toolserve.serving.loader import cpu_shares
    from toolserve.serving.rerank import RerankModel

    out: list[RerankModel] = []
    repack = _repack(args, str(files[0].path)) if files else True
    for spec, got in zip(args.rerank_model, files, strict=True):
        file = got.path
        model_id = got.origin.name if got.origin else model_stem(file.name)
        if model_id in taken or any(m.id == model_id for m in out):
            raise ToolserveError(f"--rerank-model {spec}: the id '{model_id}' is already served; rename the file")
        embedder = Embedder.load(
            str(file), n_ctx=args.ctx_size, n_threads=args.threads, repack=repack,
            core_shares=cpu_shares(), pooling=llama_cpp.LLAMA_POOLING_TYPE_RANK,
        )
        out.append(RerankModel(model_id, embedder))
    return out


def embedding_models(args: argparse.Namespace, files: list[Resolved], taken: list[str]) -> list[EmbeddingModel]:
    """--embedding-model PATH or reference: each loaded now, its id the file's stem (or the
    reference's short name)."""
    from toolserve.engine.embed import Embedder
    from toolserve.models.refs import model_stem
    from toolserve.serving.embeddings import EmbeddingModel
    from toolserve.serving.loader import cpu_shares

    out: list[EmbeddingModel] = []
    if not files:
        return out
    repack = _repack(args, str(files[0].path))
    for spec, got in zip(args.embedding_model, files, strict=True):
        file = got.path
        model_id = got.origin.name if got.origin else model_stem(file.name)
        if model_id in taken or any(m.id == model_id for m in out):
            raise ToolserveError(f"--embedding-model {spec}: the id '{model_id}' is already served; rename the file")
        embedder = Embedder.load(str(file), n_ctx=args.ctx_size, n_threads=args.threads, repack=repack, core_shares=cpu_shares())
        out.append(EmbeddingModel(model_id, embedder))
    return out
