// The chat: the log's messages (paged from the newest, older ones as you scroll up), the
// running turn as it streams, and what the log says once the turn ends. Message text is
// untrusted: it only ever goes in as textContent.

import { api, emit, on, store } from "./api.js";
import { $, clear, dayLabel, dayOf, h } from "./dom.js";
import { addActions, messageRow, noticeRow, setResult, signatureOfMessage, signatureOfRow, toolRow } from "./messages.js";

const PAGE = 50;
const list = $("messages");
const scroller = $("scroller");
const olderNote = $("older");

const rows = new Map(); // logged message id -> its row (a tool row is also under its echo's id)
let oldest = null; // the smallest id loaded
let hasOlder = false;
let loadingOlder = false;
let live = null; // the running turn as streamed: {turn, text, thinking, tools}
let ready = false; // the first page is in; events wait until then
const waiting = [];

// ---- rows ------------------------------------------------------------------------------

// A row becomes a logged message: its id, Copy and Memory.
function stamp(row, message) {
  row.dataset.id = String(message.id);
  row.dataset.date = message.date || row.dataset.date || "";
  row.classList.remove("live");
  delete row.dataset.turn;
  rows.set(message.id, row);
  if (!row.classList.contains("tool")) addActions(row, message);
}

function loggedMessage(message) {
  const row = messageRow(message);
  if (message.id !== undefined && message.id !== null) stamp(row, message);
  return row;
}

function loggedTool(message) {
  const space = message.text.indexOf(" ");
  const name = space < 0 ? message.text : message.text.slice(0, space);
  const row = toolRow(name, space < 0 ? "" : message.text.slice(space + 1));
  row.dataset.date = message.date || "";
  stamp(row, message);
  return row;
}

// One logged message as its row; an echo joins the tool row it answers when that is here.
function logged(message) {
  if (message.kind === "tool") return loggedTool(message);
  if (message.kind === "echo") {
    const tool = rows.get(message.id - 1);
    if (tool && tool.classList.contains("tool")) {
      setResult(tool, message.text, false);
      rows.set(message.id, tool);
      tool.dataset.echo = String(message.id);
      return null;
    }
  }
  return loggedMessage(message);
}

// ---- placing rows ----------------------------------------------------------------------

function nearBottom() {
  return scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 120;
}

function toBottom() {
  scroller.scrollTop = scroller.scrollHeight;
}

function add(row) {
  if (!row) return;
  const stick = nearBottom();
  list.append(row);
  markDays();
  if (stick) toBottom();
}

// Day markers go before the first row of each day; redrawn whenever rows come or go.
function markDays() {
  for (const marker of list.querySelectorAll(":scope > li.day")) marker.remove();
  let day = null;
  for (const row of Array.from(list.children)) {
    const date = row.dataset.date;
    if (!date) continue;
    const thisDay = dayOf(date);
    if (thisDay && thisDay !== day) {
      day = thisDay;
      row.before(h("li", { class: "day", role: "separator", "aria-label": dayLabel(date) },
        h("span", { text: dayLabel(date) })));
    }
  }
}

function forget(row) {
  for (const [id, mapped] of rows) if (mapped === row) rows.delete(id);
  row.remove();
}

// ---- history ---------------------------------------------------------------------------

let generation = 0; // a newer load (a reset during the first one) wins

// The newest page of the log; the page's start asks for it beside /api/me (one round trip less).
export function fetchNewest(options = {}) {
  return api(`/api/history?limit=${PAGE}`, options);
}

export async function loadNewest(pending = null) {
  const mine = ++generation;
  ready = false;
  const page = await (pending || fetchNewest());
  if (mine !== generation) return;
  live = null;
  rows.clear();
  clear(list);
  // One append, one pass of day markers, one scroll: not a layout per row.
  const made = document.createDocumentFragment();
  for (const message of page.messages) {
    const row = logged(message);
    if (row) made.append(row);
  }
  list.append(made);
  markDays();
  toBottom();
  oldest = page.messages.length ? page.messages[0].id : null;
  hasOlder = oldest !== null && oldest > 0;
  olderNote.textContent = page.count === 0 ? "No messages yet: say something." : "";
  toBottom();
  ready = true;
  for (const event of waiting.splice(0)) apply(event);
  fill();
}

async function loadOlder() {
  if (!hasOlder || loadingOlder || oldest === null) return;
  loadingOlder = true;
  olderNote.textContent = "Loading older messages…";
  try {
    const mine = generation;
    const page = await api(`/api/history?before=${oldest}&limit=${PAGE}`);
    if (mine !== generation || !ready) return; // the chat was reloaded meanwhile
    const fromBottom = scroller.scrollHeight - scroller.scrollTop;
    const made = [];
    for (const message of page.messages) {
      if (rows.has(message.id)) continue;
      if (message.kind === "echo" && made.length && made[made.length - 1].classList.contains("tool")) {
        const tool = made[made.length - 1];
        if (Number(tool.dataset.id) === message.id - 1) {
          setResult(tool, message.text, false);
          rows.set(message.id, tool);
          continue;
        }
      }
      const row = message.kind === "tool" ? loggedTool(message) : loggedMessage(message);
      made.push(row);
    }
    // a tool whose echo was the first row already here takes it in
    const first = list.querySelector(":scope > li[data-id]");
    const last = made[made.length - 1];
    if (first && last && last.classList.contains("tool") && first.dataset.kind === "echo" &&
        Number(first.dataset.id) === Number(last.dataset.id) + 1) {
      setResult(last, first.querySelector(".text").textContent, false);
      rows.set(Number(first.dataset.id), last);
      first.remove();
    }
    list.prepend(...made);
    markDays();
    scroller.scrollTop = scroller.scrollHeight - fromBottom;
    oldest = page.messages.length ? page.messages[0].id : 0;
    hasOlder = page.messages.length > 0 && oldest > 0;
    olderNote.textContent = hasOlder ? "" : "The beginning of the chat.";
  } catch (error) {
    olderNote.textContent = `Older messages did not load: ${error.message}`;
  } finally {
    loadingOlder = false;
  }
  fill();
}

// Load older pages until the list fills the screen (then scrolling up asks for more).
function fill() {
  if (hasOlder && !loadingOlder && scroller.scrollHeight <= scroller.clientHeight + 40) loadOlder();
}

scroller.addEventListener("scroll", () => {
  if (scroller.scrollTop < 300) loadOlder();
}, { passive: true });

// ---- the running turn ------------------------------------------------------------------

function ensureLive(turn) {
  if (live && live.turn === turn) return live;
  if (live) finish(live, null);
  // What the log holds of this turn already (a reload replays the turn from its start) is
  // shown from the log; the replayed pieces it holds are skipped, in order.
  const held = Array.from(list.children).filter((row) => row.dataset.id && Number(row.dataset.id) > turn &&
    (row.classList.contains("tool") || row.dataset.kind === "assistant")).length;
  live = { turn, text: null, thinking: null, thoughtAt: 0, tools: new Map(), skip: held, skipped: new Set() };
  setRunning(true);
  return live;
}

const SKIPPING = "skipping"; // a replayed reply piece the log holds already

function setRunning(running) {
  if (store.running === running) return;
  store.running = running;
  emit("running", running);
}

function liveRow(row, turn) {
  row.classList.add("live");
  row.dataset.turn = String(turn);
  return row;
}

function onText(event) {
  const state = ensureLive(event.turn);
  if (!state.text && state.skip > 0) {
    state.skip -= 1;
    state.text = SKIPPING;
  }
  if (state.text === SKIPPING) return;
  if (!state.text) {
    const row = liveRow(messageRow({ kind: "assistant", text: "", date: new Date().toISOString() }), event.turn);
    state.text = row;
    state.textNode = document.createTextNode("");
    row.querySelector(".text").append(state.textNode);
    add(row);
  }
  const stick = nearBottom();
  state.textNode.appendData(event.text);
  if (stick) toBottom();
}

function onThinking(event) {
  const state = ensureLive(event.turn);
  if (!state.thinking) {
    const text = h("pre", { class: "thinking-text" });
    const row = liveRow(h("li", { class: "thinking", dataset: { date: new Date().toISOString() } },
      h("details", { open: true }, h("summary", { text: "Thinking…" }), text)), event.turn);
    state.thinking = row;
    state.thoughtAt = performance.now();
    add(row);
  }
  const stick = nearBottom();
  state.thinking.querySelector(".thinking-text").append(event.text);
  if (stick) toBottom();
}

function onThinkingDone(event) {
  const state = ensureLive(event.turn);
  if (!state.thinking) return;
  const seconds = Math.max(1, Math.round((performance.now() - state.thoughtAt) / 1000));
  const details = state.thinking.querySelector("details");
  details.querySelector("summary").textContent = `Thought for ${seconds}s`;
  details.open = false;
  state.thinking.classList.remove("live"); // done; it stays with its turn (thinking is not logged)
  state.thinking = null;
}

function onToolCall(event) {
  const state = ensureLive(event.turn);
  state.text = null; // the reply goes on in a new row after the tool
  if (state.skip > 0) {
    state.skip -= 1;
    state.skipped.add(event.call_id);
    return;
  }
  const row = liveRow(toolRow(event.name, event.arguments), event.turn);
  state.tools.set(event.call_id, row);
  add(row);
}

function onToolResult(event) {
  const state = ensureLive(event.turn);
  if (state.skipped.has(event.call_id)) return;
  const row = state.tools.get(event.call_id);
  if (row) setResult(row, event.preview, event.is_error);
}

// R39: a shell command of the chat's own turn prints into its tool row as it runs (the
// result replaces it when the command ends). An agent's output stays in its transcript.
function onOutput(event) {
  if (event.caller !== "main" || !live) return;
  const rows_ = [...live.tools.values()];
  const row = rows_[rows_.length - 1];
  if (!row) return;
  const result = row.querySelector(".result");
  result.textContent = (result.textContent === "…" ? "" : result.textContent) + event.text;
  row.querySelector("details").open = true;
}

function onUser(event) {
  const message = event.message;
  if (live) live.text = null; // a joining message splits the reply (R36)
  if (!message || rows.has(message.id)) return;
  add(logged(message));
  olderNote.textContent = olderNote.textContent === "No messages yet: say something." ? "" : olderNote.textContent;
}

function onEnded(event) {
  const state = live && live.turn === event.turn ? live : { turn: event.turn, tools: new Map() };
  if (event.reason === "stopped") {
    add(noticeRow("Stopped. The reply so far is kept, marked incomplete.", "info"));
  } else if (event.reason !== "done") {
    add(noticeRow(event.detail || `The reply ended: ${event.reason}.`, "error"));
  } else if (event.detail) {
    add(noticeRow(event.detail, "info"));
  }
  finish(state, event);
}

function finish(state, event) {
  if (live === state) live = null;
  if (!live) setRunning(false);
  if (state.thinking) onThinkingDone({ turn: state.turn });
  reconcile(state.turn).catch((error) => add(noticeRow(`The chat could not be checked against the log: ${error.message}`, "error")));
}

// Once a turn ends, the log is the truth: if the rows after its message say what the log
// says, they only take their ids; otherwise (events missed, or seen twice) they are redrawn
// from the log. Thinking is not logged and stays as it was.
async function reconcile(turn) {
  const page = await api("/api/history?limit=200");
  const logged_ = page.messages.filter((message) => message.id > turn);
  const shown = Array.from(list.children).filter((row) =>
    (row.dataset.id && Number(row.dataset.id) > turn) || row.dataset.turn === String(turn));
  const shownSig = shown.map(signatureOfRow).filter((sig) => sig !== null);
  const loggedSig = logged_.map(signatureOfMessage).filter((sig) => sig !== null);
  const same = shownSig.length === loggedSig.length && shownSig.every((sig, at) => sig === loggedSig[at]);
  if (same) {
    const comparable = shown.filter((row) => signatureOfRow(row) !== null);
    const messages = logged_.filter((message) => signatureOfMessage(message) !== null);
    comparable.forEach((row, at) => {
      const message = messages[at];
      if (row.dataset.id) return;
      stamp(row, message);
      if (message.incomplete && !row.querySelector(".tag")) {
        row.querySelector(".meta").append(h("span", { class: "tag", text: "incomplete" }));
      }
      const echo = logged_.find((other) => other.id === message.id + 1 && other.kind === "echo");
      if (row.classList.contains("tool") && echo) {
        setResult(row, echo.text, row.classList.contains("failed"));
        rows.set(echo.id, row);
      }
    });
    return;
  }
  const stick = nearBottom();
  for (const row of shown) if (!row.classList.contains("thinking")) forget(row);
  for (const message of logged_) {
    if (rows.has(message.id)) continue;
    const row = logged(message);
    if (row) list.append(row);
  }
  markDays();
  if (stick) toBottom();
}

// ---- events ----------------------------------------------------------------------------

function apply(event) {
  switch (event.type) {
    case "user": onUser(event); break;
    case "started":
      store.turnFrom = Number.isInteger(event.id) ? event.id - 1 : null;
      ensureLive(event.turn);
      break;
    case "text": onText(event); break;
    case "thinking": onThinking(event); break;
    case "thinking_done": onThinkingDone(event); break;
    case "tool_call": onToolCall(event); break;
    case "tool_result": onToolResult(event); break;
    case "ended":
      store.turnFrom = null;
      onEnded(event);
      break;
    case "notice": add(noticeRow(event.text, event.level)); break;
    case "agent": // R38: an agent's news; its report comes as a `work` message
      add(noticeRow(`◆ [${event.name}] ${event.state}: ${event.text}`,
        event.state === "failed" ? "error" : event.state === "stopped" ? "warning" : "info"));
      break;
    case "output": onOutput(event); break;
    case "goal": add(noticeRow(event.text, event.level)); break; // issue 13: the goal's news
    case "after_turn": add(noticeRow(event.text, "error")); break; // apart from the reply, which stays saved
    case "status":
      store.status = event;
      emit("status", event);
      if (!event.running && store.running && !live) setRunning(false);
      if (event.running && !store.running) setRunning(true);
      break;
    default: break;
  }
}

on("event", (event) => {
  if (!ready) waiting.push(event);
  else apply(event);
});

on("reset", () => {
  loadNewest().catch((error) => add(noticeRow(`The chat did not reload: ${error.message}`, "error")));
});

// The page that sent a message shows it at once, even before its `user` event comes.
// A line of the page's own (issue 13: `/goal` alone shows the goal).
export function notice(text, level = "info") {
  add(noticeRow(text, level));
}

export function sent(message) {
  if (!rows.has(message.id)) add(logged(message));
  toBottom();
}
