// The memory inspector: the view as slips (each as tall as log2 of the messages it holds),
// opened into their halves down to the original message (R35's zoom), the view's bytes
// against the ceiling and floor (R19), pending summaries and token usage as small charts.

import { api, on, store } from "./api.js";
import { $, clear, h, kb, number, showError, timeLabel } from "./dom.js";

const slips = $("slips");
const viewError = $("view-error");
const turnButton = $("which-turn");
const compactionButton = $("which-compaction");
const panel = $("panel-memory");
const SVG = "http://www.w3.org/2000/svg";

let which = "turn";
let loading = false;
let lastShape = null; // lines and bytes of the view on screen, to redraw only when it changed
const sizes = []; // view bytes seen, for the sawtooth

function svg(tag, attributes = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
  return node;
}

function range(line) {
  return `${line.first}+${line.count}`;
}

function slip(line) {
  const size = Math.log2(Math.max(1, line.count));
  const button = h("button", { type: "button", class: "slip-button", "aria-expanded": "false" },
    h("span", { class: "slip-range", text: range(line) }),
    h("span", { class: "slip-count", text: line.count === 1 ? `message ${line.first}` :
      `${number(line.count)} messages` }),
    h("span", { class: line.built === false ? "slip-text unbuilt" : "slip-text", text: line.text }));
  button.setAttribute("aria-label", `${range(line)}: ${line.count === 1 ? "message " + line.first :
    number(line.count) + " messages"}. ${line.built === false ? "Not summarized yet. " : ""}${line.text}`);
  const row = h("li", { class: "slip" }, button);
  row.style.setProperty("--size", String(size));
  row.style.setProperty("--shade", String(Math.min(1, size / 16)));
  button.addEventListener("click", () => toggle(row, button, line));
  return row;
}

async function toggle(row, button, line) {
  const open = row.querySelector(":scope > .opened");
  if (open) {
    fold(row, button);
    return;
  }
  button.setAttribute("aria-busy", "true");
  try {
    const answer = await api(`/api/zoom?id=${line.first}&n=${line.count}`);
    const bar = h("button", { type: "button", class: "fold-bar", text: `Fold ${range(line)} back` });
    bar.addEventListener("click", () => {
      fold(row, button);
      button.focus();
    });
    const inside = answer.message ? original(answer.message) :
      h("ol", { class: "slips halves", "aria-label": `The two halves of ${range(line)}` },
        (answer.halves || []).map(slip));
    row.append(h("div", { class: "opened" }, bar, inside));
    row.classList.add("open");
    button.setAttribute("aria-expanded", "true");
  } catch (error) {
    showError(viewError, `Could not open ${range(line)}: ${error.message}`);
  } finally {
    button.removeAttribute("aria-busy");
  }
}

function fold(row, button) {
  const open = row.querySelector(":scope > .opened");
  if (open) open.remove();
  row.classList.remove("open");
  button.setAttribute("aria-expanded", "false");
}

function original(message) {
  const kind = message.kind === "everchat" ? "assistant" : message.kind;
  return h("article", { class: "original", "aria-label": `Message ${message.id}` },
    h("p", { class: "meta" }, h("span", { class: "who", text: `${kind} · message ${message.id}` }), " ",
      h("span", { class: "when", text: `${new Date(message.date).toLocaleDateString()} ${timeLabel(message.date)}` }),
      message.incomplete ? h("span", { class: "tag", text: "incomplete" }) : null),
    h("div", { class: "text", text: message.text }),
    (message.images || []).length ? h("div", { class: "images" }, message.images.map((digest, at) =>
      h("img", { src: `/api/asset/${encodeURIComponent(digest)}`, alt: `Image ${at + 1} of message ${message.id}` })))
      : null);
}

export async function refreshView(force = false) {
  if (loading) return;
  loading = true;
  try {
    const view = await api(`/api/view?which=${which}`);
    showError(viewError, "");
    const shape = `${which}:${view.bytes}:${view.lines.map(range).join(",")}`;
    const opened = slips.querySelector(".open");
    if (force || (shape !== lastShape && !opened)) {
      lastShape = shape;
      clear(slips);
      slips.append(...view.lines.map(slip));
      slips.setAttribute("aria-label", which === "turn" ? "Turn view lines" : "Compaction view lines");
    }
    const messages = view.lines.reduce((sum, line) => sum + line.count, 0);
    $("view-text").textContent = `${which === "turn" ? "The view the next turn starts from" :
      "The view compactions read"}: ${number(view.lines.length)} lines over ${number(messages)} messages. ` +
      "Open a slip to see its two halves, down to the original message.";
    gauge(view.bytes, view.ceiling || 131072, view.floor || 65536);
  } catch (error) {
    if (error.status !== 401) showError(viewError, `The view did not load: ${error.message}`);
  } finally {
    loading = false;
  }
}

function gauge(bytes, ceiling, floor) {
  const meter = $("gauge");
  meter.setAttribute("aria-valuemax", String(ceiling));
  meter.setAttribute("aria-valuenow", String(Math.min(bytes, ceiling)));
  meter.setAttribute("aria-valuetext", `${kb(bytes)} of ${kb(ceiling)}`);
  meter.style.setProperty("--fill", String(Math.min(1, bytes / ceiling)));
  meter.style.setProperty("--floor", String(floor / ceiling));
  meter.classList.toggle("over", bytes > ceiling);
  $("gauge-text").textContent = `${kb(bytes)} of the ${kb(ceiling)} ceiling; past it, merges bring the view ` +
    `down to the ${kb(floor)} floor (the mark).`;
  if (which === "turn" && sizes[sizes.length - 1] !== bytes) {
    sizes.push(bytes);
    if (sizes.length > 120) sizes.shift();
  }
  sawtooth(ceiling);
}

// The view's size over the status updates seen: it climbs, and drops when a batch merges.
function sawtooth(ceiling) {
  const box = $("sawtooth") || $("gauge").parentElement.appendChild(
    h("div", { id: "sawtooth", class: "sawtooth" }));
  clear(box);
  if (sizes.length < 2) return;
  const width = 240;
  const height = 48;
  const top = Math.max(ceiling, ...sizes);
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": `View size over the last ${sizes.length} changes, from ${kb(sizes[0])} to ${kb(sizes[sizes.length - 1])}` });
  const points = sizes.map((bytes, at) =>
    `${(at / (sizes.length - 1)) * width},${height - (bytes / top) * (height - 2) - 1}`).join(" ");
  chart.append(svg("line", { x1: 0, x2: width, y1: height - (ceiling / top) * (height - 2) - 1,
    y2: height - (ceiling / top) * (height - 2) - 1, class: "ceiling-line" }));
  chart.append(svg("polyline", { points, class: "size-line", fill: "none" }));
  box.append(chart);
}

function bar(label, value, max, kind = "") {
  const row = h("div", { class: `bar-row ${kind}` },
    h("span", { class: "bar-label", text: label }),
    h("span", { class: "bar-track", "aria-hidden": "true" }, h("span", { class: "bar-fill" })),
    h("span", { class: "bar-value", text: number(value) }));
  row.querySelector(".bar-fill").style.setProperty("--fill", String(max > 0 ? Math.min(1, value / max) : 0));
  return row;
}

const USAGE_NAMES = { input: "tokens in", output: "tokens out", cache_read: "cache reads", cache_write: "cache writes",
  calls: "calls", failures: "failures", turns: "turns", compactions: "compactions" };

function usageGroup(title, figures) {
  const tokens = ["input", "output", "cache_read", "cache_write"].filter((key) => key in figures);
  const max = Math.max(1, ...tokens.map((key) => Number(figures[key]) || 0));
  const rest = Object.keys(figures).filter((key) => !tokens.includes(key) && typeof figures[key] === "number");
  return h("div", { class: "usage-group" },
    title ? h("h4", { text: title }) : null,
    tokens.map((key) => bar(USAGE_NAMES[key], Number(figures[key]) || 0, max, key)),
    rest.length ? h("p", { class: "muted", text: rest.map((key) => `${USAGE_NAMES[key] || key.replace(/_/g, " ")} ` +
      number(figures[key])).join(" · ") }) : null);
}

export function showStatus(status) {
  if (!status) return;
  const pending = Number(status.pending) || 0;
  const lines = Number(status.pending_lines) || 0;
  const merges = Number(status.pending_merges) || 0;
  const failures = Number(status.failures) || 0;
  const writing = status.planner && Number(status.planner.running);
  $("pending-text").textContent = pending === 0 ? "Every summary is built." :
    `${number(pending)} to build: ${number(lines)} view lines and ${number(merges)} merges` +
    (writing ? `, ${number(writing)} being written now.` : ".");
  const bars = $("pending-bars");
  clear(bars);
  const most = Math.max(1, lines, merges, failures);
  bars.append(bar("lines", lines, most), bar("merges", merges, most), bar("failed calls", failures, most, "failures"));
  const usage = $("usage");
  clear(usage);
  const figures = status.usage || {};
  const groups = Object.entries(figures).filter(([, value]) => value && typeof value === "object");
  if (groups.length) for (const [name, group] of groups) usage.append(usageGroup(USAGE_NAMES[name] || name, group));
  else usage.append(usageGroup("", figures));
  if (typeof status.cache_share === "number") {
    usage.append(h("p", { class: "muted", text: `${Math.round(status.cache_share * 100)}% of prompt tokens were ` +
      "read from the cache." }));
  }
  if (!panel.hidden && which === "turn" && status.view_bytes !== undefined) {
    gauge(status.view_bytes, status.view_budget || 131072, status.view_floor || 65536);
  }
}

function choose(next) {
  which = next;
  turnButton.setAttribute("aria-pressed", String(which === "turn"));
  compactionButton.setAttribute("aria-pressed", String(which === "compaction"));
  refreshView(true);
}

turnButton.addEventListener("click", () => choose("turn"));
compactionButton.addEventListener("click", () => choose("compaction"));
$("view-refresh").addEventListener("click", () => refreshView(true));

on("status", (status) => {
  if (panel.hidden) return;
  showStatus(status);
  if (lastShape !== null && !lastShape.startsWith(`${which}:${status.view_bytes}:`) && which === "turn") refreshView();
});

export async function openInspector() {
  refreshView(lastShape === null);
  try {
    const status = await api("/api/status");
    store.status = status;
    showStatus(status);
  } catch (error) {
    if (error.status !== 401) showError(viewError, `The figures did not load: ${error.message}`);
  }
}
