// One message as DOM: a user bubble (editable), or an answer with its reasoning, Markdown
// content, tool-call cards, numbers and raw view. Pure builders: what they do on a click is
// the `act` callbacks' business (app.js).

import { codeBlock, render } from "./markdown.js";
import { textOf } from "./store.js";

export function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = text;
  return node;
}

export function button(label, cls, onClick) {
  const b = el("button", cls, label);
  b.type = "button";
  b.addEventListener("click", onClick);
  return b;
}

function pretty(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return null;
  }
}

// special tokens and markup tags of the raw text, shown apart from the words around them
const MARKERS = /(<\|[^|\n]{1,40}\|>|<\/?[A-Za-z_][\w-]{0,30}>|\[\/?[A-Z_]{3,30}\]|<｜[^｜\n]{1,40}｜>)/;

function markedText(text) {
  const pre = el("pre", "raw-text");
  text.split(MARKERS).forEach((part, i) => pre.append(i % 2 ? el("span", "token", part) : document.createTextNode(part)));
  return pre;
}

function userView(msg, ctx, act) {
  const node = el("div", "msg user");
  const bubble = el("div", "bubble");
  if (ctx.ui.editing) {
    const area = el("textarea", "edit-input");
    area.value = textOf(msg.content);
    area.rows = Math.min(12, area.value.split("\n").length + 1);
    const row = el("div", "row");
    row.append(
      button("Send", "primary edit-send", () => act.editSend(ctx.index, area.value)),
      button("Cancel", "edit-cancel", () => act.editCancel(msg)),
    );
    bubble.append(area, row);
    node.append(bubble);
    return node;
  }
  bubble.append(el("div", "user-text", textOf(msg.content)));
  const images = Array.isArray(msg.content) ? msg.content.filter((p) => p.type === "image_url") : [];
  if (images.length) {
    const strip = el("div", "thumbs");
    for (const p of images) {
      const img = el("img");
      img.src = p.image_url.url;
      img.alt = "attached image";
      strip.append(img);
    }
    bubble.append(strip);
  }
  node.append(bubble);
  if (!ctx.busy) node.append(actions([button("Edit", "edit", () => act.edit(msg))]));
  return node;
}

function actions(buttons) {
  const row = el("div", "actions");
  row.append(...buttons);
  return row;
}

function toolCard(call, ctx, act) {
  const card = el("div", "tool-card");
  card.dataset.callId = call.id;
  const head = el("div", "tool-head");
  head.append(el("span", "tool-name", call.function.name), el("span", "tool-id", call.id));
  const args = pretty(call.function.arguments);
  const body = el("pre", "tool-args", args ?? call.function.arguments);
  card.append(head, body);
  if (args === null && !ctx.streaming) card.append(el("div", "warn", "arguments are not valid JSON"));
  const result = ctx.results.get(call.id);
  if (result !== undefined) {
    card.append(el("div", "label", "result"), el("pre", "tool-result", result));
  } else if (ctx.canAnswer) {
    const area = el("textarea", "tool-result-input");
    area.rows = 2;
    area.placeholder = "The tool's result to send back (text or JSON)";
    area.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        act.toolResult(ctx.index, call, area.value);
      }
    });
    card.append(area, button("Send result", "primary send-result", () => act.toolResult(ctx.index, call, area.value)));
  }
  return card;
}

/** A call the server ran on an MCP server: its tool, arguments and result (or error). */
function mcpCard(call) {
  const card = el("div", "tool-card mcp-card");
  card.dataset.callId = call.id;
  const head = el("div", "tool-head");
  head.append(el("span", "tool-name", call.name), el("span", "tool-id", `MCP · ${call.server_label}`));
  card.append(head, el("pre", "tool-args", pretty(call.arguments) ?? call.arguments));
  if (call.error) {
    const text = call.error.message ?? JSON.stringify(call.error.content ?? call.error);
    card.append(el("div", "label", "error"), el("pre", "tool-result error", text));
  } else if (call.output !== null && call.output !== undefined) {
    card.append(el("div", "label", "result"), el("pre", "tool-result", call.output));
  } else {
    card.append(el("div", "label muted", call.status === "incomplete" ? "cut short: not run" : "running…"));
  }
  return card;
}

function stat(name, label, value) {
  const s = el("span", "stat");
  s.dataset.stat = name;
  s.append(el("span", "stat-label", label), el("span", "stat-value", value));
  return s;
}

function statsView(meta) {
  const row = el("div", "stats");
  const u = meta.usage;
  if (meta.ttft != null) row.append(stat("ttft", "TTFT", `${Math.round(meta.ttft)} ms`));
  if (meta.tps != null) row.append(stat("tps", "speed", `${meta.tps.toFixed(1)} tok/s`));
  if (u) {
    row.append(stat("prompt", "prompt", String(u.prompt_tokens)));
    row.append(stat("cached", "cached", String(u.prompt_tokens_details?.cached_tokens ?? 0)));
    row.append(stat("completion", "completion", String(u.completion_tokens)));
  }
  if (meta.finish) row.append(stat("finish", "finish", meta.finish));
  if (meta.toolFormat) row.append(stat("format", "tool format", meta.toolFormat));
  return row;
}

function rawView(msg) {
  const meta = msg._meta;
  const wrap = el("div", "raw");
  const left = el("div", "raw-col");
  left.append(el("div", "label", "generated text (special tokens included)"));
  if (typeof meta.raw === "string") left.append(markedText(meta.raw));
  else left.append(el("div", "muted", meta.rawNote || "The server sent no raw text for this answer."));
  const right = el("div", "raw-col");
  right.append(el("div", "label", "parsed"));
  const parsed = { content: msg.content ?? null };
  if (msg.reasoning_content) parsed.reasoning_content = msg.reasoning_content;
  if (msg.tool_calls?.length) parsed.tool_calls = msg.tool_calls;
  right.append(el("pre", "raw-parsed", JSON.stringify(parsed, null, 2)));
  wrap.append(left, right);
  return wrap;
}

function assistantView(msg, ctx, act) {
  const meta = msg._meta || {};
  const node = el("div", "msg assistant");
  if (msg.reasoning_content) {
    const details = el("details", "reasoning");
    details.open = Boolean(ctx.ui.reasoningOpen);
    details.addEventListener("toggle", () => (ctx.ui.reasoningOpen = details.open));
    const words = msg.reasoning_content.trim().split(/\s+/).length;
    details.append(el("summary", null, ctx.streaming && !msg.content && !msg.tool_calls ? "Reasoning…" : `Reasoning (${words} words)`));
    details.append(el("div", "reasoning-text", msg.reasoning_content));
    node.append(details);
  }
  for (const call of msg._mcp || []) node.append(mcpCard(call));
  const content = el("div", "content");
  if (msg.content) {
    const json = meta.json ? pretty(msg.content) : null;
    content.append(json ? codeBlock(json, "json") : render(msg.content));
  } else if (ctx.streaming && !msg.reasoning_content && !msg.tool_calls?.length && !msg._mcp?.length) {
    content.append(el("span", "cursor", "…"));
  }
  node.append(content);
  for (const call of msg.tool_calls || []) node.append(toolCard(call, ctx, act));
  if (meta.error) node.append(el("div", "error", meta.error));
  if (meta.stopped) node.append(el("div", "muted stopped", "Stopped."));
  if (!ctx.streaming) {
    node.append(statsView(meta));
    const buttons = [button(ctx.ui.raw ? "Hide raw" : "Raw", "raw-toggle", () => act.toggleRaw(msg))];
    if (ctx.isLast && !ctx.busy) buttons.push(button("Regenerate", "regenerate", () => act.regenerate(ctx.index)));
    if (msg.content) buttons.push(button("Copy", "copy-answer", () => navigator.clipboard?.writeText(msg.content).catch(() => {})));
    node.append(actions(buttons));
    if (ctx.ui.raw) node.append(rawView(msg));
  }
  return node;
}

/** The node of message `msg`; null for tool results, which show in their call's card. */
export function messageView(msg, ctx, act) {
  if (msg.role === "user") return userView(msg, ctx, act);
  if (msg.role === "assistant") return assistantView(msg, ctx, act);
  return null;
}
