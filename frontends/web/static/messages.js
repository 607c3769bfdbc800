// The chat's rows, built from messages and events: a message, a tool call on one line that
// opens to its arguments and result, a notice. Message text is untrusted: textContent only.

import { api } from "./api.js";
import { clear, copyText, h, number, timeLabel } from "./dom.js";

const WHO = { user: "You", assistant: "Everchat", everchat: "Everchat", note: "Note", work: "Agent", echo: "Result" };

export function messageRow(message) {
  const kind = message.kind === "everchat" ? "assistant" : message.kind;
  const body = h("div", { class: "text" });
  body.textContent = message.text;
  const row = h("li", { class: `msg msg-${kind}`, dataset: { kind, date: message.date || "" } },
    h("div", { class: "meta" },
      h("span", { class: "who", text: WHO[kind] || kind }),
      h("span", { class: "when", text: timeLabel(message.date) }),
      message.incomplete ? h("span", { class: "tag", text: "incomplete" }) : null),
    body,
    images(message));
  return row;
}

function images(message) {
  const digests = message.images || [];
  if (!digests.length) return null;
  return h("div", { class: "images" }, digests.map((digest, at) =>
    h("a", { href: `/api/asset/${encodeURIComponent(digest)}`, target: "_blank", rel: "noopener" },
      h("img", { src: `/api/asset/${encodeURIComponent(digest)}`, alt: `Image ${at + 1} of ${digests.length}`,
        loading: "lazy" }))));
}

async function toggleMemory(id, box, button) {
  if (!box.hidden) {
    box.hidden = true;
    button.setAttribute("aria-expanded", "false");
    return;
  }
  box.hidden = false;
  button.setAttribute("aria-expanded", "true");
  clear(box);
  box.append(h("p", { class: "muted", text: "Looking it up…" }));
  try {
    const found = await api(`/api/memory?id=${id}`);
    clear(box);
    const line = found.line || {};
    box.append(h("p", {}, "Kept now by the view line ", h("code", { text: `${line.first}+${line.count}` }),
      line.built === false ? " (not summarized yet)" : "", ":"), h("blockquote", { text: line.text || "" }));
    const path = (found.path || []).filter((step, at) => !(at === 0 && step.first === line.first &&
      step.count === line.count));
    if (path.length) {
      box.append(h("p", { text: "From that line down to the message:" }),
        h("ol", { class: "path" }, path.map((step) => h("li", {},
          h("code", { text: `${step.first}+${step.count}` }), " ", h("span", { text: step.text || "" })))));
    }
  } catch (error) {
    clear(box);
    box.append(h("p", { class: "error", text: error.message }));
  }
}

export function toolLabel(name, argumentsText) {
  let args = {};
  try {
    args = JSON.parse(argumentsText || "{}") || {};
  } catch (error) {
    args = {};
  }
  if (name === "zoom") {
    if (typeof args.id === "string" && !/^\d+$/.test(args.id)) return `Read ${args.id}'s transcript`;
    const n = Number(args.n === undefined ? 1 : args.n);
    if (n <= 1) return `Read message ${args.id}` + (Number(args.page) > 1 ? ` (page ${args.page})` : "");
    return `Looked back at ${number(n)} messages`;
  }
  if (name === "date") return `Checked the date of ${args.id}`;
  if (name === "search") return `Searched the web for ${JSON.stringify(String(args.query || ""))}`;
  if (name === "fetch") return `Read the page ${args.url || ""}`.trim();
  if (name === "spawn") return `Started the agent ${args.name || ""}`.trim();
  if (name === "tell") return `Wrote to the agent ${args.name || ""}`.trim();
  return `Used ${name}`;
}

function pretty(argumentsText) {
  try {
    return JSON.stringify(JSON.parse(argumentsText), null, 2);
  } catch (error) {
    return argumentsText || "";
  }
}

export function toolRow(name, argumentsText) {
  const result = h("pre", { class: "result", text: "…" });
  const row = h("li", { class: "tool", dataset: { name, date: new Date().toISOString() } },
    h("details", {},
      h("summary", {}, h("span", { class: "gear", "aria-hidden": "true", text: "⚙" }), " ",
        h("span", { class: "label", text: toolLabel(name, argumentsText) })),
      h("div", { class: "tool-body" },
        h("p", { class: "muted", text: "Arguments" }), h("pre", { class: "args", text: pretty(argumentsText) }),
        h("p", { class: "muted", text: "Result" }), result)));
  return row;
}

export function setResult(row, text, isError) {
  const result = row.querySelector(".result");
  result.textContent = text;
  row.classList.toggle("failed", Boolean(isError));
  const old = row.querySelector(".sources");
  if (old) old.remove();
  if (isError) return;
  if (row.dataset.name === "search") {
    const found = searchResults(text);
    if (found.length) row.append(sourceList(found, "Search results"));
  } else if (row.dataset.name === "fetch") {
    const page = fetchedPage(text);
    if (page) row.append(sourceList([page], "Page read"));
  }
}

// A fetch tool's result text (actors/hands/web.py: "URL: …", then "Title: …" when the page
// has one) as {title, url}, or null when it names no http(s) URL (a redirect note, say).
export function fetchedPage(text) {
  const lines = String(text || "").split("\n");
  const head = /^URL: (.+)$/.exec(lines[0] || "");
  const url = head ? safeUrl(head[1].trim()) : null;
  if (!url) return null;
  const title = /^Title: (.+)$/.exec(lines[1] || "");
  return { title: title ? title[1] : url, url, snippet: "" };
}

// A search tool's result text (actors/hands/web.py: "N. title", then the URL and the
// snippet indented) as [{title, url, snippet}], keeping only http and https URLs.
export function searchResults(text) {
  const lines = String(text || "").split("\n");
  const found = [];
  for (let at = 0; at < lines.length; at += 1) {
    const head = /^(\d+)\. (.+)$/.exec(lines[at]);
    if (!head || !(lines[at + 1] || "").startsWith("   ")) continue;
    const url = safeUrl(lines[at + 1].trim());
    if (!url) continue;
    const next = lines[at + 2] || "";
    const snippet = next.startsWith("   ") ? next.trim() : "";
    found.push({ title: head[2], url, snippet });
  }
  return found;
}

function safeUrl(text) {
  try {
    const url = new URL(text);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  } catch (error) {
    return null;
  }
}

// The sources as links: text only (textContent), http(s) hrefs only, no referrer.
function sourceList(found, label) {
  return h("ol", { class: "sources", "aria-label": label }, found.map((item) =>
    h("li", {},
      h("a", { href: item.url, target: "_blank", rel: "noopener noreferrer", text: item.title }),
      " ", h("span", { class: "source-url", text: item.url }),
      item.snippet ? h("span", { class: "snippet", text: item.snippet }) : null)));
}

// Copy and Memory, for a row that is a logged message.
export function addActions(row, message) {
  if (row.querySelector(".actions")) return;
  const text = () => row.querySelector(".text").textContent;
  const memory = h("div", { class: "memory-of", role: "region", "aria-label": `Where message ${message.id} is kept`,
    hidden: true });
  const memoryButton = h("button", { type: "button", class: "link", "aria-expanded": "false",
    "aria-label": `Memory of message ${message.id}`, text: "Memory" });
  memoryButton.addEventListener("click", () => toggleMemory(message.id, memory, memoryButton));
  const copyButton = h("button", { type: "button", class: "link", "aria-label": `Copy message ${message.id}`,
    text: "Copy" });
  copyButton.addEventListener("click", async () => {
    const done = await copyText(text());
    copyButton.textContent = done ? "Copied" : "Copy failed";
    setTimeout(() => { copyButton.textContent = "Copy"; }, 1500);
  });
  row.append(h("div", { class: "actions" }, h("span", { class: "id", text: `#${message.id}` }), copyButton,
    memoryButton), memory);
}

export function noticeRow(text, level = "info") {
  return h("li", { class: `notice notice-${level}`, dataset: { date: new Date().toISOString() }, text });
}

// What a row stands for, to compare what streamed with what the log kept.
export function signatureOfRow(row) {
  if (row.classList.contains("tool")) return `T:${row.dataset.name}`;
  if (!row.classList.contains("msg")) return null;
  const kind = row.dataset.kind;
  if (kind === "user" || kind === "note") return `${kind}:${row.dataset.id}`;
  return `${kind}:${row.querySelector(".text").textContent}`;
}

export function signatureOfMessage(message) {
  const kind = message.kind === "everchat" ? "assistant" : message.kind;
  if (kind === "echo") return null;
  if (kind === "tool") return `T:${message.text.split(" ", 1)[0]}`;
  if (kind === "user" || kind === "note") return `${kind}:${message.id}`;
  return `${kind}:${message.text}`;
}

