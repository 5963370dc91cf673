// The chat page: state, the request/stream loop, and the wiring of the controls.

import { apiKey, fold, foldResponse, getJSON, newAnswer, setApiKey, streamChat } from "./api.js";
import { buildBody, buildResponsesBody, curlCommand, rawAvailable } from "./request.js";
import { bindSettings } from "./settings.js";
import * as store from "./store.js";
import { button, el, messageView } from "./views.js";

const $ = (id) => document.getElementById(id);

const state = {
  settings: store.loadSettings(),
  conversations: store.loadConversations(),
  current: null,
  models: [],
  busy: null, // {controller, conv, msg} while an answer streams
  attachments: [], // {name, url} images for the next message
  mcpServers: [], // the servers of --mcp-config: {server_label, transport}
};
const ui = new WeakMap(); // per message: {raw, reasoningOpen, editing}; not stored
const uiOf = (msg) => (ui.has(msg) ? ui.get(msg) : ui.set(msg, {}).get(msg));

// ---- notices and storage ------------------------------------------------------------------

function notice(text) {
  const n = $("notice");
  n.textContent = text;
  n.hidden = !text;
}

function save() {
  const conv = state.current;
  if (conv && conv.messages.length && !state.conversations.includes(conv)) state.conversations.unshift(conv);
  if (conv) conv.title = store.title(conv);
  const ok = store.saveConversations(state.conversations) && store.saveCurrentId(conv?.id ?? null);
  if (!ok) notice("The browser's storage is full: this conversation is not saved (images take much room).");
  renderSidebar();
}

// ---- models and the API key ---------------------------------------------------------------

const card = () => state.models.find((m) => m.id === $("model").value);

async function loadModels() {
  try {
    state.models = (await getJSON("/v1/models")).data || [];
  } catch (e) {
    if (e.status === 401) askKey();
    else notice(`Cannot list the models: ${e.message}`);
    return;
  }
  const select = $("model");
  // grouped by where each model came from, as `toolserve models` lists them; the title names the file
  const groups = new Map();
  for (const m of state.models) {
    const ts = m.toolserve || {};
    const label = SOURCES[ts.source] || SOURCES[ts.backend] || (ts.kind === "embedding" ? "Embeddings" : "Other");
    const option = Object.assign(el("option", null, m.id), { value: m.id, title: ts.reference || ts.path || m.id });
    if (!groups.has(label)) groups.set(label, Object.assign(el("optgroup"), { label }));
    groups.get(label).append(option);
  }
  select.replaceChildren(...groups.values());
  const wanted = state.models.some((m) => m.id === state.settings.model) ? state.settings.model : state.models[0]?.id;
  if (wanted) select.value = wanted;
  showModel();
}

// ---- MCP servers ----------------------------------------------------------------------------

/** The servers of the server's --mcp-config, each with a switch: while one is on, the page sends
 * Responses requests naming it, and the server lists its tools and runs the model's calls. */
async function loadMcp() {
  try {
    state.mcpServers = (await getJSON("/v1/mcp/servers")).data || [];
  } catch {
    state.mcpServers = [];
  }
  const box = $("mcp-servers");
  const on = new Set(state.settings.mcpServers || []);
  box.replaceChildren(...state.mcpServers.map((srv) => {
    const label = el("label", "inline mcp-server");
    const input = Object.assign(el("input", "mcp-toggle"), { type: "checkbox", checked: on.has(srv.server_label) });
    input.dataset.label = srv.server_label;
    input.addEventListener("change", () => {
      const now = new Set(state.settings.mcpServers || []);
      if (input.checked) now.add(srv.server_label);
      else now.delete(srv.server_label);
      state.settings.mcpServers = [...now];
      store.saveSettings(state.settings);
    });
    label.append(input, ` ${srv.server_label} `, el("span", "muted", `(${srv.transport})`));
    return label;
  }));
  $("mcp-status").textContent = state.mcpServers.length ? "" : "None: start the server with --mcp-config FILE.";
}

/** The labels of the MCP servers turned on that the server still has. */
const mcpOn = () => (state.settings.mcpServers || []).filter((l) => state.mcpServers.some((s) => s.server_label === l));

const SOURCES = { hf: "Hugging Face", ollama: "Ollama", lmstudio: "LM Studio", bundled: "Bundled", file: "Files", upstream: "Upstream" };

function showModel() {
  const ts = card()?.toolserve || {};
  const size = ts.size_bytes && (ts.size_bytes >= 1e9 ? `${(ts.size_bytes / 1e9).toFixed(1)} GB` : `${Math.round(ts.size_bytes / 1e6)} MB`);
  const defaults = ts.sampling_defaults || {};
  const temp = defaults.temperature;
  const short = (d) => d.source.split(" (")[0]; // "model card (HuggingFaceTB/...)" -> "model card"
  const bits = [
    ts.quantization, size, ts.tool_format && `tools: ${ts.tool_format}`, ts.n_ctx && `${ts.n_ctx} ctx`, ts.vision && "vision", ts.mode,
    temp && temp.source !== "protocol default" && `temperature ${temp.value} (${short(temp)})`,
  ];
  $("model-info").title = [ts.reference || ts.path, ...Object.entries(defaults).map(([k, d]) => `${k} ${d.value}: ${d.source}`)].filter(Boolean).join("\n");
  // an empty field sends nothing, and the request gets the model's own value: say which
  for (const field of ["temperature", "top_p"]) {
    $(`s-${field}`).placeholder = defaults[field] ? `model: ${defaults[field].value}` : "server default";
  }
  $("model-info").textContent = bits.filter(Boolean).join(" · ");
  $("attach-label").hidden = ts.vision === false;
}

function askKey() {
  const dialog = $("key-dialog");
  if (!dialog.open) dialog.showModal();
  $("key-input").focus();
}

// ---- sidebar ------------------------------------------------------------------------------

function renderSidebar() {
  const list = $("conversations");
  list.replaceChildren(...state.conversations.map((c) => {
    const li = el("li", c === state.current ? "active" : null);
    li.dataset.id = c.id;
    li.append(
      button(c.title || store.title(c), "open-chat", () => openChat(c)),
      button("×", "icon delete-chat", () => deleteChat(c)),
    );
    li.lastChild.setAttribute("aria-label", "Delete conversation");
    return li;
  }));
}

function openChat(conv) {
  state.current = conv;
  store.saveCurrentId(conv?.id ?? null);
  $("sidebar").classList.remove("open");
  renderSidebar();
  renderMessages();
}

function deleteChat(conv) {
  if (state.busy?.conv === conv) state.busy.controller.abort();
  state.conversations = state.conversations.filter((c) => c !== conv);
  store.saveConversations(state.conversations);
  if (state.current === conv) openChat(store.newConversation());
  else renderSidebar();
}

// ---- messages -----------------------------------------------------------------------------

const nodes = new Map(); // message -> its node, for re-rendering the one that streams

function context(conv, msg, index, results) {
  const after = conv.messages.slice(index + 1);
  const streaming = state.busy?.msg === msg;
  return {
    index, ui: uiOf(msg), results, streaming, busy: Boolean(state.busy),
    isLast: index === conv.messages.length - 1,
    canAnswer: !state.busy && after.every((m) => m.role === "tool"),
  };
}

function toolResults(conv) {
  return new Map(conv.messages.filter((m) => m.role === "tool").map((m) => [m.tool_call_id, store.textOf(m.content)]));
}

function nearBottom() {
  const box = $("messages");
  return box.scrollHeight - box.scrollTop - box.clientHeight < 80;
}

function renderMessages() {
  const conv = state.current;
  const stick = nearBottom();
  const results = toolResults(conv);
  nodes.clear();
  const views = [];
  conv.messages.forEach((msg, i) => {
    const node = messageView(msg, context(conv, msg, i, results), actions);
    if (node) {
      nodes.set(msg, node);
      views.push(node);
    }
  });
  if (!views.length) views.push(el("div", "empty muted", "Ask something. Tools, JSON output and sampling are in the settings (⚙)."));
  $("messages").replaceChildren(...views);
  if (stick) $("messages").scrollTop = $("messages").scrollHeight;
}

let pending = null;
function renderStreaming(conv, msg) {
  if (pending || state.current !== conv) return;
  pending = requestAnimationFrame(() => {
    pending = null;
    const old = nodes.get(msg);
    if (!old || state.current !== conv) return;
    const stick = nearBottom();
    const node = messageView(msg, context(conv, msg, conv.messages.indexOf(msg), toolResults(conv)), actions);
    old.replaceWith(node);
    nodes.set(msg, node);
    if (stick) $("messages").scrollTop = $("messages").scrollHeight;
  });
}

function showSettings(open) {
  $("settings").classList.toggle("open", open);
  $("app").classList.toggle("settings-open", open);
}

function setBusy(busy) {
  $("send").hidden = busy;
  $("stop").hidden = !busy;
  document.body.classList.toggle("busy", busy);
}

/** Settings that cannot become a request, as a notice; true when they can. */
function settingsOk() {
  try {
    buildBody(state.settings, card(), []);
    return true;
  } catch (e) {
    notice(e.message);
    showSettings(true);
    return false;
  }
}

/** Send the conversation and stream the answer into a new assistant message. */
async function run() {
  const conv = state.current;
  const model = card();
  const servers = mcpOn();
  const body = servers.length
    ? buildResponsesBody(state.settings, model, conv.messages, servers)
    : buildBody(state.settings, model, store.wireMessages(conv, state.settings.system));
  const path = servers.length ? "/v1/responses" : "/v1/chat/completions";
  conv.lastRequest = body;
  conv.lastPath = path;
  const meta = { model: body.model, json: state.settings.jsonMode !== "off" };
  const msg = { role: "assistant", content: "", _meta: meta };
  conv.messages.push(msg);
  const controller = new AbortController();
  state.busy = { controller, conv, msg };
  notice("");
  setBusy(true);
  save();
  renderMessages();
  const answer = newAnswer();
  const started = performance.now();
  let first = null;
  const apply = () => {
    msg.content = answer.content || (answer.toolCalls.length ? null : "");
    if (answer.reasoning) msg.reasoning_content = answer.reasoning;
    if (answer.toolCalls.length) msg.tool_calls = answer.toolCalls.filter(Boolean);
    if (answer.mcp.length) msg._mcp = answer.mcp.map((c) => ({ ...c }));
  };
  try {
    await streamChat(body, (chunk) => {
      (servers.length ? foldResponse : fold)(answer, chunk);
      if (first === null && (answer.content || answer.reasoning || answer.toolCalls.length || answer.mcp.length)) first = performance.now();
      apply();
      renderStreaming(conv, msg);
    }, controller.signal, path);
  } catch (e) {
    if (e.name === "AbortError") meta.stopped = true;
    else meta.error = e.message;
    if (e.status === 401) askKey();
  }
  const ended = performance.now();
  apply();
  const done = answer.usage?.completion_tokens;
  if (first !== null) meta.ttft = first - started;
  if (first !== null && done > 1 && ended > first) meta.tps = (done - 1) / ((ended - first) / 1000);
  meta.usage = answer.usage;
  meta.finish = answer.finish ?? (meta.stopped ? "stopped" : null);
  meta.toolFormat = answer.toolserve?.tool_format ?? model?.toolserve?.tool_format ?? null;
  const raw = answer.toolserve?.choices?.find((c) => c.index === 0)?.raw_text;
  if (typeof raw === "string") meta.raw = raw;
  else if (servers.length) meta.rawNote = "MCP servers were on: the answer came through the Responses API, which carries no raw text.";
  else if (meta.stopped) meta.rawNote = "Stopped before the end: the raw text comes with the stream's last chunk.";
  else if (!rawAvailable(model)) meta.rawNote = "A passthrough upstream parses its own output: toolserve never sees the raw text.";
  else if (!state.settings.raw) meta.rawNote = "Not asked for: turn on 'ask for the raw generated text' in the settings.";
  state.busy = null;
  setBusy(false);
  save();
  if (state.current === conv) renderMessages();
}

function stop() {
  state.busy?.controller.abort();
}

const actions = {
  edit(msg) {
    uiOf(msg).editing = true;
    renderMessages();
  },
  editCancel(msg) {
    uiOf(msg).editing = false;
    renderMessages();
  },
  editSend(index, text) {
    if (state.busy || !settingsOk()) return;
    const conv = state.current;
    const msg = conv.messages[index];
    const images = Array.isArray(msg.content) ? msg.content.filter((p) => p.type === "image_url") : [];
    const edited = { role: "user", content: images.length ? [{ type: "text", text }, ...images] : text };
    conv.messages.splice(index, conv.messages.length - index, edited);
    run();
  },
  regenerate(index) {
    if (state.busy || !settingsOk()) return;
    state.current.messages.splice(index);
    run();
  },
  toolResult(index, call, text) {
    if (state.busy) return;
    const conv = state.current;
    let at = index + 1;
    while (at < conv.messages.length && conv.messages[at].role === "tool") at++;
    conv.messages.splice(at, 0, { role: "tool", tool_call_id: call.id, content: text });
    const answered = new Set(conv.messages.slice(index + 1, at + 1).map((m) => m.tool_call_id));
    const all = conv.messages[index].tool_calls.every((c) => answered.has(c.id));
    if (all && at === conv.messages.length - 1 && settingsOk()) {
      run();
    } else {
      save();
      renderMessages();
    }
  },
  toggleRaw(msg) {
    uiOf(msg).raw = !uiOf(msg).raw;
    renderMessages();
  },
};

// ---- composer -----------------------------------------------------------------------------

function send() {
  const text = $("input").value;
  if (state.busy || (!text.trim() && !state.attachments.length) || !settingsOk()) return;
  const images = state.attachments.map((a) => ({ type: "image_url", image_url: { url: a.url } }));
  const content = images.length ? [{ type: "text", text }, ...images] : text;
  state.current.messages.push({ role: "user", content });
  $("input").value = "";
  state.attachments = [];
  renderAttachments();
  growInput();
  run();
}

function renderAttachments() {
  $("attachments").replaceChildren(...state.attachments.map((a, i) => {
    const item = el("div", "attachment");
    const img = el("img");
    img.src = a.url;
    img.alt = a.name;
    item.append(img, button("×", "icon remove-attachment", () => {
      state.attachments.splice(i, 1);
      renderAttachments();
    }));
    return item;
  }));
}

function attach(files) {
  for (const file of files) {
    if (!file.type.startsWith("image/")) continue;
    const reader = new FileReader();
    reader.onload = () => {
      state.attachments.push({ name: file.name, url: reader.result });
      renderAttachments();
    };
    reader.readAsDataURL(file);
  }
}

function growInput() {
  const input = $("input");
  input.style.height = "auto";
  input.style.height = `${Math.min(input.scrollHeight, 240)}px`;
}

// ---- exports ------------------------------------------------------------------------------

function showExport(title, text, filename) {
  $("export-title").textContent = title;
  $("export-text").value = text;
  $("export-dialog").dataset.filename = filename;
  $("export-dialog").showModal();
}

function exportJSON() {
  const conv = state.current;
  const messages = store.wireMessages(conv, state.settings.system);
  showExport("The conversation as OpenAI chat messages", JSON.stringify({ model: card()?.id, messages }, null, 2), `${conv.id}.json`);
}

function exportCurl() {
  const body = state.current.lastRequest;
  const text = body ? curlCommand(body, location.origin, Boolean(apiKey()), state.current.lastPath) : "# No request has been sent in this conversation yet.\n";
  showExport("The last request of this conversation, as a curl command", text, `${state.current.id}.sh`);
}

// ---- start --------------------------------------------------------------------------------

function wire() {
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    send();
  });
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send();
    }
  });
  $("input").addEventListener("input", growInput);
  $("input").addEventListener("paste", (e) => attach(e.clipboardData?.files || []));
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && state.busy) {
      e.preventDefault();
      stop();
    }
  });
  $("stop").addEventListener("click", stop);
  $("attach").addEventListener("change", (e) => {
    attach(e.target.files);
    e.target.value = "";
  });
  $("new-chat").addEventListener("click", () => openChat(store.newConversation()));
  $("model").addEventListener("change", () => {
    state.settings.model = $("model").value;
    store.saveSettings(state.settings);
    showModel();
  });
  $("toggle-sidebar").addEventListener("click", () => $("sidebar").classList.toggle("open"));
  $("toggle-settings").addEventListener("click", () => showSettings(!$("settings").classList.contains("open")));
  for (const b of document.querySelectorAll(".close-drawer")) {
    b.addEventListener("click", () => (b.dataset.close === "settings" ? showSettings(false) : $("sidebar").classList.remove("open")));
  }
  $("notice").addEventListener("click", () => notice(""));
  $("export-json").addEventListener("click", exportJSON);
  $("export-curl").addEventListener("click", exportCurl);
  $("export-close").addEventListener("click", () => $("export-dialog").close());
  $("export-copy").addEventListener("click", () => navigator.clipboard?.writeText($("export-text").value).catch(() => {}));
  $("export-download").addEventListener("click", () => {
    const a = el("a");
    a.href = URL.createObjectURL(new Blob([$("export-text").value], { type: "text/plain" }));
    a.download = $("export-dialog").dataset.filename;
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  });
  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    setApiKey($("key-input").value.trim());
    $("key-dialog").close();
    loadModels();
    loadMcp();
  });
  $("forget-key").addEventListener("click", () => {
    setApiKey("");
    loadModels();
  });
}

function start() {
  wire();
  bindSettings(state.settings);
  const id = store.loadCurrentId();
  openChat(state.conversations.find((c) => c.id === id) || store.newConversation());
  loadModels();
  loadMcp();
  $("input").focus();
}

start();
