// The settings panel: each control bound to a field of the settings object, the JSON editors
// checked as they are typed, tool_choice offering the functions of the tool editor.

import { parseJSON, parseTools } from "./request.js";
import { saveSettings } from "./store.js";
import { el } from "./views.js";

const $ = (id) => document.getElementById(id);

const FIELDS = {
  "s-system": "system", "s-temperature": "temperature", "s-top_p": "top_p", "s-max_tokens": "max_tokens",
  "s-seed": "seed", "s-stop": "stop", "s-tools-on": "toolsOn", "s-tools": "tools", "s-tool-choice": "toolChoice",
  "s-parallel": "parallel", "s-json-mode": "jsonMode", "s-schema": "schema", "s-extra": "extra", "s-raw": "raw",
};

function checkJSON(statusId, text, what, describe) {
  const status = $(statusId);
  try {
    status.textContent = describe(text);
    status.classList.remove("bad");
  } catch (e) {
    status.textContent = e.message.startsWith(what) ? e.message : `${what}: ${e.message}`;
    status.classList.add("bad");
  }
}

function refresh(s) {
  let names = [];
  checkJSON("tools-status", s.tools, "tools", (t) => {
    names = parseTools(t).map((x) => x.function.name);
    return `${names.length} tool${names.length === 1 ? "" : "s"}: ${names.join(", ")}`;
  });
  const choice = $("s-tool-choice");
  const options = ["auto", "required", "none", ...names.map((n) => `fn:${n}`)];
  choice.replaceChildren(...options.map((v) => Object.assign(el("option", null, v.startsWith("fn:") ? `function ${v.slice(3)}` : v), { value: v })));
  if (!options.includes(s.toolChoice)) s.toolChoice = "auto";
  choice.value = s.toolChoice;
  checkJSON("schema-status", s.schema, "schema", (t) => (parseJSON(t, "schema"), s.jsonMode === "json_schema" ? "in use" : "not in use"));
  checkJSON("extra-status", s.extra, "extra request fields", (t) => (t.trim() ? Object.keys(parseJSON(t, "extra request fields")).join(", ") : ""));
  $("s-tools").disabled = !s.toolsOn;
  choice.disabled = $("s-parallel").disabled = !s.toolsOn;
}

/** Show `settings` in the panel and keep them up to date (and stored) as the user edits. */
export function bindSettings(settings) {
  for (const [id, key] of Object.entries(FIELDS)) {
    const input = $(id);
    if (input.type === "checkbox") input.checked = Boolean(settings[key]);
    else input.value = settings[key];
    input.addEventListener(input.tagName === "SELECT" || input.type === "checkbox" ? "change" : "input", () => {
      settings[key] = input.type === "checkbox" ? input.checked : input.value;
      refresh(settings);
      saveSettings(settings);
    });
  }
  refresh(settings);
}
