// What the page keeps in the browser (localStorage): conversations and settings.
// A stored message is an OpenAI chat message; keys starting with "_" (the page's own notes:
// timings, usage, raw text, errors) are taken off before it goes to the server or an export.

const CONVERSATIONS = "toolserve.conversations";
const CURRENT = "toolserve.current";
const SETTINGS = "toolserve.settings";

export const EXAMPLE_TOOLS = JSON.stringify([
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Get the current weather in a city.",
      parameters: {
        type: "object",
        properties: {
          city: { type: "string", description: "The city, e.g. Paris" },
          unit: { type: "string", enum: ["celsius", "fahrenheit"] },
        },
        required: ["city"],
      },
    },
  },
], null, 2);

export const EXAMPLE_SCHEMA = JSON.stringify({
  type: "object",
  properties: { answer: { type: "string" }, confidence: { type: "number" } },
  required: ["answer"],
}, null, 2);

export const DEFAULT_SETTINGS = {
  model: "",
  system: "",
  temperature: "",
  top_p: "",
  max_tokens: "",
  seed: "",
  stop: "",
  toolsOn: false,
  tools: EXAMPLE_TOOLS,
  toolChoice: "auto",
  parallel: true,
  jsonMode: "off",
  schema: EXAMPLE_SCHEMA,
  extra: "",
  raw: true,
  mcpServers: [], // labels of --mcp-config servers turned on
};

function read(key, fallback) {
  try {
    const value = JSON.parse(localStorage.getItem(key));
    return value ?? fallback;
  } catch {
    return fallback;
  }
}

/** false when the browser refused (storage full, e.g. with large images). */
function write(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
    return true;
  } catch {
    return false;
  }
}

export const loadSettings = () => ({ ...DEFAULT_SETTINGS, ...read(SETTINGS, {}) });
export const saveSettings = (s) => write(SETTINGS, s);
export const loadConversations = () => read(CONVERSATIONS, []).filter((c) => c && Array.isArray(c.messages));
export const saveConversations = (list) => write(CONVERSATIONS, list);
export const loadCurrentId = () => read(CURRENT, null);
export const saveCurrentId = (id) => write(CURRENT, id);

const newId = () => `c${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;

export const newConversation = () => ({ id: newId(), title: "", created: Date.now(), messages: [], lastRequest: null });

export function textOf(content) {
  if (typeof content === "string") return content;
  return (content || []).filter((p) => p.type === "text").map((p) => p.text).join("\n");
}

export function title(conv) {
  const first = conv.messages.find((m) => m.role === "user");
  const text = first ? textOf(first.content).trim().replace(/\s+/g, " ") : "";
  return text ? (text.length > 48 ? `${text.slice(0, 47)}…` : text) : "New chat";
}

/** The conversation as OpenAI messages: the system prompt first, the page's notes off, and
 * answers that failed before saying anything left out. */
export function wireMessages(conv, system) {
  const out = system.trim() ? [{ role: "system", content: system }] : [];
  for (const m of conv.messages) {
    if (m.role === "assistant" && !m.content && !m.tool_calls?.length) continue;
    const clean = {};
    for (const [k, v] of Object.entries(m)) if (!k.startsWith("_") && v !== undefined) clean[k] = v;
    out.push(clean);
  }
  return out;
}
