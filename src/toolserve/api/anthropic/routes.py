"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API as an adapter
of the conversation core (Claude Code and the `anthropic` client talk to a local model): the
request read by input.py, the answer written by output.py.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from toolserve.api.anthropic.input import chat_request
from toolserve.api.anthropic.output import MessagesRun, stream_error
from toolserve.api.anthropic.schemas import CountTokensRequest, MessagesRequest
from toolserve.api.deps import RegistryDep, log_prompt
from toolserve.api.streaming import sse_response, unless_disconnected
from toolserve.errors import InvalidRequest
from toolserve.serving.conversation import start_conversation
from toolserve.serving.entries import LocalModel

router = APIRouter()


@router.post("/v1/messages")
async def messages(req: MessagesRequest, request: Request, registry: RegistryDep) -> Response:
    conv = await start_conversation(registry, chat_request(req))
    if conv.prompt_text is not None:
        log_prompt(request, conv.prompt_text)
    prompt = getattr(conv, "prompt", None)  # tokens of a local model's prompt; an upstream's are known at the end
    run = MessagesRun(conv.choice(0), req.model or conv.model_id, len(prompt) if prompt is not None else 0)
    if req.stream:
        return sse_response(run.events(), on_close=conv.ticket.release, named=True, error=stream_error)
    try:
        return JSONResponse(await unless_disconnected(request, run.complete()))
    finally:
        conv.ticket.release()


@router.post("/v1/messages/count_tokens")
async def count_tokens(req: CountTokensRequest, registry: RegistryDep) -> dict[str, int]:
    """The prompt's tokens, rendered and tokenized exactly as a request would be (then the
    place in the queue that preparing it took is given back)."""
    neutral = chat_request(req)
    if not isinstance(registry.resolve(neutral.model), LocalModel):
        raise InvalidRequest("count_tokens needs a local model: an upstream's tokenizer is not known here.", param="model")
    conv = await start_conversation(registry, neutral)
    conv.ticket.release()
    return {"input_tokens": len(conv.prompt)}
