// The chat completions request the settings describe (a Responses request when MCP servers are
// on), and the exports of a conversation.

export class SettingsError extends Error {}

export function parseJSON(text, what) {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new SettingsError(`${what}: not valid JSON (${e.message})`);
  }
}

/** The tools of the editor as OpenAI tools (a bare function object is wrapped). */
export function parseTools(text) {
  const tools = parseJSON(text, "tools");
  if (!Array.isArray(tools)) throw new SettingsError("tools: expected a JSON array of tools");
  return tools.map((t, i) => {
    const tool = t && t.type === undefined && t.name ? { type: "function", function: t } : t;
    if (!tool || tool.type !== "function" || typeof tool.function?.name !== "string") {
      throw new SettingsError(`tools[${i}]: expected {"type": "function", "function": {"name": ...}}`);
    }
    return tool;
  });
}

/** Whether the server can return the raw text for this model (not for a passthrough upstream,
 * whose own server parses its output). */
export const rawAvailable = (card) => card?.toolserve?.mode !== "passthrough";

function number(value, what, integer) {
  if (value === "" || value === null || value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isFinite(n) || (integer && !Number.isInteger(n))) throw new SettingsError(`${what}: not ${integer ? "an integer" : "a number"}`);
  return n;
}

/** The request body for `messages` under settings `s`, on the model of `card`. */
export function buildBody(s, card, messages) {
  const body = { model: card?.id, messages, stream: true, stream_options: { include_usage: true } };
  const sampling = {
    temperature: number(s.temperature, "temperature"),
    top_p: number(s.top_p, "top_p"),
    max_tokens: number(s.max_tokens, "max tokens", true),
    seed: number(s.seed, "seed", true),
  };
  for (const [k, v] of Object.entries(sampling)) if (v !== undefined) body[k] = v;
  const stops = s.stop.split("\n").filter((x) => x !== "");
  if (stops.length) body.stop = stops;
  if (s.toolsOn) {
    body.tools = parseTools(s.tools);
    body.tool_choice = s.toolChoice.startsWith("fn:")
      ? { type: "function", function: { name: s.toolChoice.slice(3) } }
      : s.toolChoice;
    body.parallel_tool_calls = s.parallel;
  }
  if (s.jsonMode === "json_object") body.response_format = { type: "json_object" };
  if (s.jsonMode === "json_schema") {
    const schema = parseJSON(s.schema, "schema");
    body.response_format = { type: "json_schema", json_schema: { name: "response", schema, strict: true } };
  }
  if (s.raw && rawAvailable(card)) body.toolserve = { raw: true };
  if (s.extra.trim()) {
    const extra = parseJSON(s.extra, "extra request fields");
    if (typeof extra !== "object" || extra === null || Array.isArray(extra)) throw new SettingsError("extra request fields: expected a JSON object");
    Object.assign(body, extra);
  }
  return body;
}

/** A shell command that sends `body` again (the key, if any, from $TOOLSERVE_API_KEY). */
export function curlCommand(body, origin, withKey, path = "/v1/chat/completions") {
  const lines = [
    `curl -N ${origin}${path}`,
    "  -H 'Content-Type: application/json'",
  ];
  if (withKey) lines.push('  -H "Authorization: Bearer $TOOLSERVE_API_KEY"');
  lines.push("  --data-binary @- <<'JSON'");
  return `${lines.join(" \\\n")}\n${JSON.stringify(body, null, 2)}\nJSON\n`;
}

/** The conversation as Responses input items: chat messages, function calls and their
 * outputs, and the MCP calls an answer made on the server (kept in its `_mcp` note). */
export function responsesInput(messages) {
  const input = [];
  for (const m of messages) {
    if (m.role === "user") {
      const parts = typeof m.content === "string" ? m.content : m.content.map((p) => (p.type === "image_url"
        ? { type: "input_image", image_url: p.image_url.url }
        : { type: "input_text", text: p.text }));
      input.push({ role: "user", content: parts });
    } else if (m.role === "assistant") {
      for (const c of m._mcp || []) {
        const { id, server_label, name, arguments: args, output, error } = c;
        input.push({ type: "mcp_call", id, server_label, name, arguments: args, output, error });
      }
      if (m.content) input.push({ role: "assistant", content: m.content });
      for (const c of m.tool_calls || []) input.push({ type: "function_call", call_id: c.id, name: c.function.name, arguments: c.function.arguments });
    } else if (m.role === "tool") {
      input.push({ type: "function_call_output", call_id: m.tool_call_id, output: m.content });
    }
  }
  return input;
}

/** The Responses request for `messages` (the page's own, `_mcp` notes kept) under settings
 * `s`, with the MCP servers `servers` (labels of --mcp-config) whose tools run on the server. */
export function buildResponsesBody(s, card, messages, servers) {
  const chat = buildBody({ ...s, raw: false, extra: "" }, card, []);
  const body = { model: chat.model, input: responsesInput(messages), stream: true, store: false };
  if (s.system.trim()) body.instructions = s.system;
  for (const k of ["temperature", "top_p", "seed", "stop", "parallel_tool_calls"]) if (chat[k] !== undefined) body[k] = chat[k];
  if (chat.max_tokens !== undefined) body.max_output_tokens = chat.max_tokens;
  const functions = (chat.tools || []).map((t) => ({ type: "function", ...t.function }));
  body.tools = [...functions, ...servers.map((label) => ({ type: "mcp", server_label: label, require_approval: "never" }))];
  const choice = chat.tool_choice;
  if (choice) body.tool_choice = typeof choice === "string" ? choice : { type: "function", name: choice.function.name };
  if (chat.response_format?.type === "json_object") body.text = { format: { type: "json_object" } };
  if (chat.response_format?.type === "json_schema") body.text = { format: { type: "json_schema", name: "response", schema: chat.response_format.json_schema.schema, strict: true } };
  if (s.extra.trim()) Object.assign(body, parseJSON(s.extra, "extra request fields"));
  return body;
}
