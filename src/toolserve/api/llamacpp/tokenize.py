"""POST /tokenize and /detokenize, as llama-server names them: a prompt, or a chat rendered as the
model's template renders it, to tokens, and back."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter

from toolserve.api.deps import RegistryDep
from toolserve.api.misc import local_pipeline
from toolserve.api.openai import convert
from toolserve.api.openai.schemas import ChatCompletionRequest, DetokenizeRequest, TokenizeRequest
from toolserve.errors import InvalidRequest, Unsupported
from toolserve.serving.conversation import check_counts
from toolserve.serving.pipeline import Pipeline

router = APIRouter()


@router.post("/tokenize")
async def tokenize(req: TokenizeRequest, registry: RegistryDep) -> dict[str, Any]:
    pipe = await local_pipeline(registry, req.model, "/tokenize")
    if req.messages is not None:  # the caps of a chat request, before any work
        images = convert.image_sources(req.messages)
        check_counts(pipe.limits, {}, messages=len(req.messages), tools=len(req.tools or []), images=len(images))
        if images and not pipe.engine.info.vision:
            raise Unsupported(f"{images[0][0]} is an image, but this model accepts text only.", param=images[0][0])
    return await asyncio.to_thread(_tokenize, pipe, req)  # a long text takes a while: not on the event loop


def _tokenize(pipe: Pipeline, req: TokenizeRequest) -> dict[str, Any]:
    text = req.prompt if req.prompt is not None else req.content
    if req.messages is not None:
        chat = ChatCompletionRequest.model_construct(messages=req.messages, tools=req.tools, tool_choice=req.tool_choice,
                                     chat_template_kwargs=req.chat_template_kwargs)
        text = pipe.render_chat(convert.to_messages(req.messages), convert.chat_options(chat))
    if text is None:
        raise InvalidRequest("Give 'prompt' (or 'content', or 'messages') to tokenize.", param="prompt")
    tokens = pipe.tokenize_prompt(text) if req.add_special_tokens else pipe.engine.tokenize(text)
    return {"tokens": tokens, "count": len(tokens), "max_model_len": pipe.engine.info.n_ctx}


@router.post("/detokenize")
async def detokenize(req: DetokenizeRequest, registry: RegistryDep) -> dict[str, Any]:
    pipe = await local_pipeline(registry, req.model, "/detokenize")
    n_vocab = pipe.engine.info.n_vocab
    bad = next((t for t in req.tokens if t >= n_vocab), None)
    if bad is not None:
        raise InvalidRequest(f"token {bad} is outside the vocabulary (0..{n_vocab - 1}).", param="tokens")
    text = (await asyncio.to_thread(pipe.engine.detokenize, req.tokens)).decode("utf-8", "replace")
    return {"prompt": text, "content": text}
