// Building elements without innerHTML: every text goes in as textContent, so message text
// (untrusted) is never parsed as markup.

export function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "hidden") node.hidden = Boolean(value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

export function append(node, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function $(id) {
  return document.getElementById(id);
}

export function clear(node) {
  while (node.firstChild) node.firstChild.remove();
}

export function showError(node, text) {
  node.textContent = text || "";
  node.hidden = !text;
}

const NUMBER = new Intl.NumberFormat("en-US");

export function number(n) {
  return NUMBER.format(Number(n) || 0);
}

export function kb(bytes) {
  const value = (Number(bytes) || 0) / 1000; // as the terminal counts: 128,000 bytes is 128K
  return `${value >= 100 ? value.toFixed(0) : value.toFixed(1)} KB`;
}

export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch (error) {
    // no clipboard API here (an http origin other than localhost): the old way
    const area = h("textarea", { class: "offscreen", readonly: true, "aria-hidden": "true" });
    area.value = text;
    document.body.append(area);
    area.select();
    const done = document.execCommand("copy");
    area.remove();
    return done;
  }
}

// "Thu 3 Dec 2026" for a day marker, "17:05" for a message.
export function dayOf(iso) {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? "" : date.toDateString();
}

export function dayLabel(iso) {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return "";
  const today = new Date();
  const yesterday = new Date(today.getTime() - 86400000);
  if (date.toDateString() === today.toDateString()) return "Today";
  if (date.toDateString() === yesterday.toDateString()) return "Yesterday";
  return date.toLocaleDateString(undefined, { weekday: "long", year: "numeric", month: "long", day: "numeric" });
}

export function timeLabel(iso) {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? "" : date.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" });
}
