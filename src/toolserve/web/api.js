// This server's own API, same origin: the API key, JSON calls, and the chat completions (or,
// with MCP servers on, Responses) stream folded into one answer.

const KEY = "toolserve.apiKey";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export const apiKey = () => localStorage.getItem(KEY) || "";
export const setApiKey = (key) => (key ? localStorage.setItem(KEY, key) : localStorage.removeItem(KEY));

function headers(json) {
  const h = {};
  if (json) h["Content-Type"] = "application/json";
  const key = apiKey();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

async function errorOf(resp) {
  let message = `${resp.status} ${resp.statusText}`;
  try {
    const body = await resp.json();
    message = body?.error?.message || message;
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(resp.status, message);
}

export async function getJSON(path) {
  const resp = await fetch(path, { headers: headers(false) });
  if (!resp.ok) throw await errorOf(resp);
  return resp.json();
}

/** POST `body` (stream: true) to `path` (chat completions, or /v1/responses); `onChunk` gets
 * each chunk or event. Aborting `signal` cancels the request, and with it the generation on the
 * server. */
export async function streamChat(body, onChunk, signal, path = "/v1/chat/completions") {
  const resp = await fetch(path, {
    method: "POST", headers: headers(true), body: JSON.stringify(body), signal,
  });
  if (!resp.ok) throw await errorOf(resp);
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      const data = event.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (!data) continue;
      if (data === "[DONE]") return;
      const chunk = JSON.parse(data);
      if (chunk.error && !chunk.type) throw new ApiError(0, chunk.error.message); // a failure after the stream began
      if (chunk.type === "error") throw new ApiError(0, chunk.message);
      if (chunk.type === "response.failed") throw new ApiError(0, chunk.response?.error?.message || "the response failed");
      onChunk(chunk);
    }
  }
}

export const newAnswer = () => ({ content: "", reasoning: "", toolCalls: [], mcp: [], finish: null, usage: null, toolserve: null });

/** Add one stream chunk to `answer` (choice 0: the page asks for one). */
export function fold(answer, chunk) {
  for (const c of chunk.choices || []) {
    if (c.index !== 0) continue;
    const d = c.delta || {};
    if (d.content) answer.content += d.content;
    if (d.reasoning_content) answer.reasoning += d.reasoning_content;
    for (const t of d.tool_calls || []) {
      const call = (answer.toolCalls[t.index] ||= { id: "", type: "function", function: { name: "", arguments: "" } });
      if (t.id) call.id = t.id;
      if (t.function?.name) call.function.name = t.function.name; // sent whole, once
      if (t.function?.arguments) call.function.arguments += t.function.arguments;
    }
    if (c.finish_reason) answer.finish = c.finish_reason;
  }
  if (chunk.usage) answer.usage = chunk.usage;
  if (chunk.toolserve) answer.toolserve = chunk.toolserve;
}

/** Add one Responses stream event to `answer`: text, reasoning, function calls (as chat
 * tool_calls), MCP calls run on the server (`answer.mcp`), and the usage as chat counts it. */
export function foldResponse(answer, ev) {
  const item = ev.item;
  if (ev.type === "response.output_text.delta") answer.content += ev.delta;
  else if (ev.type === "response.reasoning_summary_text.delta") answer.reasoning += ev.delta;
  else if (ev.type === "response.output_item.added" && item.type === "function_call") {
    answer.toolCalls.push({ id: item.call_id, type: "function", function: { name: item.name, arguments: "" }, _item: item.id });
  } else if (ev.type === "response.function_call_arguments.delta") {
    const call = answer.toolCalls.find((c) => c._item === ev.item_id);
    if (call) call.function.arguments += ev.delta;
  } else if (ev.type === "response.output_item.added" && item.type === "mcp_call") {
    answer.mcp.push({ ...item });
  } else if (ev.type === "response.mcp_call_arguments.delta") {
    const call = answer.mcp.find((c) => c.id === ev.item_id);
    if (call) call.arguments += ev.delta;
  } else if (ev.type === "response.output_item.done" && item.type === "mcp_call") {
    const at = answer.mcp.findIndex((c) => c.id === item.id);
    if (at >= 0) answer.mcp[at] = { ...item };
  } else if (ev.type === "response.completed" || ev.type === "response.incomplete") {
    const u = ev.response.usage;
    if (u) {
      answer.usage = {
        prompt_tokens: u.input_tokens, completion_tokens: u.output_tokens, total_tokens: u.total_tokens,
        prompt_tokens_details: { cached_tokens: u.input_tokens_details?.cached_tokens ?? 0 },
      };
    }
    answer.finish = ev.type === "response.incomplete" ? "length" : answer.toolCalls.length ? "tool_calls" : "stop";
    for (const c of answer.toolCalls) delete c._item;
  }
}
