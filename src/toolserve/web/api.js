// This server's own API, same origin: the API key, JSON calls, and the chat completions stream
// folded into one answer.

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

/** POST `body` (stream: true) to /v1/chat/completions; `onChunk` gets each chunk. Aborting
 * `signal` cancels the request, and with it the generation on the server. */
export async function streamChat(body, onChunk, signal) {
  const resp = await fetch("/v1/chat/completions", {
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
      if (chunk.error) throw new ApiError(0, chunk.error.message); // a failure after the stream began
      onChunk(chunk);
    }
  }
}

export const newAnswer = () => ({ content: "", reasoning: "", toolCalls: [], finish: null, usage: null, toolserve: null });

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
