// Markdown to DOM nodes, for model output: fenced code, headings, lists, quotes, tables, rules,
// paragraphs; inline code, bold, italic, strikethrough, links. Every piece of text goes in as a
// text node and links must be http(s) or mailto, so no output can inject markup or script.
// An unclosed fence (an answer still streaming) renders as code up to the end.

const FENCE = /^\s{0,3}(`{3,}|~{3,})\s*([^\s`]*)/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
const QUOTE = /^\s{0,3}>\s?/;
const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const TABLE_SEP = /^\s*\|?\s*:?-{1,}:?\s*(\|\s*:?-{1,}:?\s*)*\|?\s*$/;

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function safeHref(url) {
  try {
    const u = new URL(url, location.href);
    return ["http:", "https:", "mailto:"].includes(u.protocol) ? u.href : null;
  } catch {
    return null;
  }
}

// inline spans: the earliest match wins; bold/italic/strike/link text is parsed again inside
const INLINE = [
  ["code", /(`+)([\s\S]*?[^`])\1(?!`)/],
  ["link", /\[([^\]\n]+)\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/],
  ["auto", /<(https?:\/\/[^\s>]+)>/],
  ["strong", /\*\*(?=\S)([\s\S]*?\S)\*\*|__(?=\S)([\s\S]*?\S)__/],
  ["em", /\*(?=[^\s*])([\s\S]*?[^\s*])\*|(?<![\w])_(?=\S)([\s\S]*?\S)_(?![\w])/],
  ["del", /~~(?=\S)([\s\S]*?\S)~~/],
];

export function inline(text, parent) {
  while (text) {
    let best = null;
    for (const [kind, re] of INLINE) {
      const m = re.exec(text);
      if (m && (best === null || m.index < best.m.index)) best = { kind, m };
    }
    if (best === null) {
      appendText(parent, text);
      return;
    }
    const { kind, m } = best;
    if (m.index > 0) appendText(parent, text.slice(0, m.index));
    if (kind === "code") {
      parent.append(el("code", null, m[2].replace(/^ (.*) $/s, "$1")));
    } else if (kind === "link" || kind === "auto") {
      const label = m[1];
      const href = safeHref(kind === "link" ? m[2] : m[1]);
      if (href) {
        const a = el("a");
        a.href = href;
        a.target = "_blank";
        a.rel = "noopener noreferrer";
        inline(label, a);
        parent.append(a);
      } else {
        inline(label, parent);
      }
    } else {
      const node = el(kind);
      inline(m[1] ?? m[2], node);
      parent.append(node);
    }
    text = text.slice(m.index + m[0].length);
  }
}

function appendText(parent, text) {
  // a single newline inside a paragraph is a line break, as chat answers mean it
  const lines = text.split("\n");
  lines.forEach((line, i) => {
    if (i > 0) parent.append(el("br"));
    if (line) parent.append(document.createTextNode(line));
  });
}

export function codeBlock(code, lang) {
  const wrap = el("div", "codeblock");
  const head = el("div", "codeblock-head");
  head.append(el("span", "lang", lang || "text"));
  const copy = el("button", "copy", "Copy");
  copy.type = "button";
  copy.addEventListener("click", () => {
    navigator.clipboard?.writeText(code).then(() => {
      copy.textContent = "Copied";
      setTimeout(() => (copy.textContent = "Copy"), 1200);
    }, () => {});
  });
  head.append(copy);
  const pre = el("pre");
  const c = el("code", lang ? `language-${lang}` : null, code);
  pre.append(c);
  wrap.append(head, pre);
  return wrap;
}

function cells(line) {
  let s = line.trim();
  if (s.startsWith("|")) s = s.slice(1);
  if (s.endsWith("|") && !s.endsWith("\\|")) s = s.slice(0, -1);
  return s.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|"));
}

function isBlockStart(line, next) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line) ||
    (line.includes("|") && next !== undefined && TABLE_SEP.test(next));
}

function list(lines, i, parent) {
  const first = ITEM.exec(lines[i]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const items = []; // each item's lines, its marker taken off
  while (i < lines.length) {
    const line = lines[i];
    const m = ITEM.exec(line);
    if (m && m[1].length <= indent + 1 && /\d/.test(m[2]) === ordered) {
      items.push([m[3]]);
      i++;
    } else if (line.trim() === "") {
      // a blank line ends the list unless the next line goes on indented or is another item
      const next = lines[i + 1];
      const goesOn = next !== undefined && (/^\s{2,}\S/.test(next) || (ITEM.test(next) && ITEM.exec(next)[1].length <= indent + 1));
      if (!goesOn) break;
      items[items.length - 1].push("");
      i++;
    } else if (/^\s+\S/.test(line) || !isBlockStart(line, lines[i + 1])) {
      items[items.length - 1].push(line.replace(/^\s{1,4}/, ""));
      i++;
    } else {
      break;
    }
  }
  const node = el(ordered ? "ol" : "ul");
  if (ordered && parseInt(first[2], 10) !== 1) node.start = parseInt(first[2], 10);
  for (const body of items) {
    const li = el("li");
    if (body.length > 1) blocks(body.join("\n"), li);
    else inline(body[0], li);
    node.append(li);
  }
  parent.append(node);
  return i;
}

function table(lines, i, parent) {
  const head = cells(lines[i]);
  const aligns = cells(lines[i + 1]).map((c) => (c.endsWith(":") ? (c.startsWith(":") ? "center" : "right") : ""));
  const t = el("table");
  const tr = el("tr");
  head.forEach((h, k) => {
    const th = el("th");
    if (aligns[k]) th.className = `align-${aligns[k]}`;
    inline(h, th);
    tr.append(th);
  });
  t.append(el("thead"));
  t.firstChild.append(tr);
  const body = el("tbody");
  i += 2;
  while (i < lines.length && lines[i].includes("|") && lines[i].trim() !== "") {
    const row = el("tr");
    cells(lines[i]).slice(0, head.length).forEach((c, k) => {
      const td = el("td");
      if (aligns[k]) td.className = `align-${aligns[k]}`;
      inline(c, td);
      row.append(td);
    });
    body.append(row);
    i++;
  }
  t.append(body);
  const wrap = el("div", "table-wrap");
  wrap.append(t);
  parent.append(wrap);
  return i;
}

export function blocks(text, parent) {
  const lines = text.replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (line.trim() === "") {
      i++;
    } else if ((m = FENCE.exec(line))) {
      const fence = m[1];
      const code = [];
      i++;
      while (i < lines.length && !new RegExp(`^\\s{0,3}${fence[0]}{${fence.length},}\\s*$`).test(lines[i])) {
        code.push(lines[i]);
        i++;
      }
      i++; // the closing fence (or the end of an answer still streaming)
      parent.append(codeBlock(code.join("\n"), m[2]));
    } else if ((m = HEADING.exec(line))) {
      const h = el(`h${m[1].length}`);
      inline(m[2], h);
      parent.append(h);
      i++;
    } else if (RULE.test(line)) {
      parent.append(el("hr"));
      i++;
    } else if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && lines[i].trim() !== "" && (QUOTE.test(lines[i]) || !isBlockStart(lines[i]))) {
        body.push(lines[i].replace(QUOTE, ""));
        i++;
      }
      const q = el("blockquote");
      blocks(body.join("\n"), q);
      parent.append(q);
    } else if (ITEM.test(line)) {
      i = list(lines, i, parent);
    } else if (line.includes("|") && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1])) {
      i = table(lines, i, parent);
    } else {
      const para = [];
      while (i < lines.length && lines[i].trim() !== "" && (para.length === 0 || !isBlockStart(lines[i], lines[i + 1]))) {
        para.push(lines[i].trim());
        i++;
      }
      const p = el("p");
      inline(para.join("\n"), p);
      parent.append(p);
    }
  }
  return parent;
}

/** The Markdown `text` as a fragment of safe DOM nodes. */
export function render(text) {
  return blocks(text, document.createDocumentFragment());
}
