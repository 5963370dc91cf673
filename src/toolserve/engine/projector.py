"""Images, through libmtmd (in llama-cpp-python): the projector's context, an image's tokens,
and evaluating an image whole into a sequence (in its own decode calls)."""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import llama_cpp

from toolserve.engine.base import MediaSpan, media_key
from toolserve.errors import InvalidRequest, ModelLoadError
from toolserve.types import ImageData


@llama_cpp.llama_log_callback
def _quiet(level: int, text: bytes, user_data: object) -> None:
    """libmtmd's log sink: its per-image chatter stays out of the server's output."""


class _Chunk:
    """An encoded-input chunk of libmtmd, freed with its last reference."""

    def __init__(self, ptr: object):
        self.ptr = ptr

    def __del__(self) -> None:
        from llama_cpp import mtmd_cpp

        mtmd_cpp.mtmd_input_chunk_free(self.ptr)


class Projector:
    """A multimodal projector loaded for one model. Used by `tokenize_image` (any thread) and
    by the engine's worker: one lock around its context."""

    def __init__(self, path: str, model: Any, threads: int):
        from llama_cpp import mtmd_cpp

        mtmd_cpp.mtmd_log_set(_quiet, None)
        mtmd_cpp.mtmd_helper_log_set(_quiet, None)
        params = mtmd_cpp.mtmd_context_params_default()
        params.use_gpu = True  # the same device as the model, where llama.cpp was built with one
        params.n_threads = threads
        params.print_timings = False
        params.warmup = False
        ctx = mtmd_cpp.mtmd_init_from_file(path.encode(), model, params)
        if not ctx:
            raise ModelLoadError(f"cannot load the multimodal projector {path} for this model")
        if not mtmd_cpp.mtmd_support_vision(ctx):
            mtmd_cpp.mtmd_free(ctx)
            raise ModelLoadError(f"{path} is not a vision projector")
        self._ctx: Any = ctx
        self.lock = threading.Lock()

    def tokenize(self, image: ImageData, n_batch: int) -> list[int | MediaSpan]:
        """The model's tokens for one image: its begin/end tokens around one MediaSpan."""
        from llama_cpp import mtmd_cpp

        marker = mtmd_cpp.mtmd_default_marker()
        data = (ctypes.c_ubyte * len(image.rgb)).from_buffer_copy(image.rgb)
        out: list[int | MediaSpan] = []
        with self.lock:
            bitmap = mtmd_cpp.mtmd_bitmap_init(image.width, image.height, data)
            chunks = mtmd_cpp.mtmd_input_chunks_init()
            try:
                mtmd_cpp.mtmd_bitmap_set_id(bitmap, image.digest.encode())
                text = mtmd_cpp.mtmd_input_text(marker, len(marker), False, True)
                bitmaps = (mtmd_cpp.mtmd_bitmap_p_ctypes * 1)(bitmap)
                rc = mtmd_cpp.mtmd_tokenize(self._ctx, chunks, ctypes.byref(text), bitmaps, 1)
                if rc != 0:
                    raise InvalidRequest(f"The image ({image.width}x{image.height}) cannot be prepared for this model (libmtmd error {rc}).")
                for i in range(mtmd_cpp.mtmd_input_chunks_size(chunks)):
                    chunk = mtmd_cpp.mtmd_input_chunks_get(chunks, i)
                    if mtmd_cpp.mtmd_input_chunk_get_type(chunk) == mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_TEXT:
                        n = ctypes.c_size_t()
                        ids = mtmd_cpp.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                        out.extend(ids[k] for k in range(n.value))
                        continue
                    n_tokens = mtmd_cpp.mtmd_input_chunk_get_n_tokens(chunk)
                    if n_tokens > n_batch and mtmd_cpp.mtmd_decode_use_non_causal(self._ctx, chunk):
                        raise InvalidRequest(
                            f"The image becomes {n_tokens} tokens, more than this model can take at once ({n_batch}); send a smaller image."
                        )
                    handle = _Chunk(mtmd_cpp.mtmd_input_chunk_copy(chunk))
                    n_pos = mtmd_cpp.mtmd_input_chunk_get_n_pos(chunk)
                    out.append(MediaSpan(0, n_tokens, n_pos, media_key(image.digest), handle))
            finally:
                mtmd_cpp.mtmd_input_chunks_free(chunks)
                mtmd_cpp.mtmd_bitmap_free(bitmap)
        return out

    def eval(self, lctx: Any, image: MediaSpan, n_past: int, seq: int, n_batch: int, logits_last: bool) -> tuple[int, int]:
        """Encode `image` and decode its embeddings into sequence `seq` from position `n_past`:
        libmtmd's return code and the position after it."""
        from llama_cpp import mtmd_cpp

        new_n_past = llama_cpp.llama_pos(0)
        with self.lock:
            rc = mtmd_cpp.mtmd_helper_eval_chunk_single(
                self._ctx, lctx, image.handle.ptr, n_past, seq, n_batch, logits_last, ctypes.byref(new_n_past),
            )
        return rc, new_n_past.value

    def close(self) -> None:
        from llama_cpp import mtmd_cpp

        if self._ctx is not None:
            mtmd_cpp.mtmd_free(self._ctx)
            self._ctx = None
