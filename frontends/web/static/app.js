// The page's start: trade the link's token (#TOKEN) or pairing code (#pair=CODE) for a
// session cookie, drop the fragment from the address, then open the chat; without a session,
// the locked screen. Each concern is its own module; they share the store in api.js.

import { api, ApiError, clientName, on, store } from "./api.js";
import { fetchNewest, loadNewest, notice } from "./chat.js";
import "./composer.js";
import { $ } from "./dom.js";
import { openInspector, showStatus } from "./inspector.js";
import { openSettings, showMe } from "./settings.js";
import { connect, disconnect, resumeFrom, savedPosition } from "./socket.js";

const TABS = ["chat", "memory", "settings"];

function showLocked(why) {
  disconnect();
  $("starting").hidden = true;
  $("app").hidden = true;
  $("locked").hidden = false;
  const text = $("locked-why");
  text.textContent = "";
  if (why) text.append(`${why} `);
  text.append("Open the link ");
  const code = document.createElement("code");
  code.textContent = "everchat web";
  text.append(code, " printed.");
  document.title = "Everchat (locked)";
}

on("locked", showLocked);

async function trade() {
  const fragment = decodeURIComponent(location.hash.slice(1));
  if (!fragment) return null;
  history.replaceState(null, "", location.pathname + location.search);
  const name = clientName();
  try {
    if (fragment.startsWith("pair=")) {
      await api("/api/pair/redeem", { method: "POST", json: { code: fragment.slice(5), name } });
    } else {
      await api("/api/session", { method: "POST", json: { token: fragment, name } });
    }
    return null;
  } catch (error) {
    if (error instanceof ApiError && error.status === 403) {
      return fragment.startsWith("pair=") ? "This pairing link was used already or has expired." :
        "That link's token is not this chat's (a new one may have been made).";
    }
    return `The link did not open a session: ${error.message}.`;
  }
}

function select(name, focus = false) {
  for (const tab of TABS) {
    const button = $(`tab-${tab}`);
    const selected = tab === name;
    button.setAttribute("aria-selected", String(selected));
    button.tabIndex = selected ? 0 : -1;
    $(`panel-${tab}`).hidden = !selected;
    if (selected && focus) button.focus();
  }
  if (name === "memory") openInspector();
  if (name === "settings") openSettings();
  if (name === "chat") $("composer-text").focus({ preventScroll: true });
}

function tabs() {
  TABS.forEach((tab, at) => {
    const button = $(`tab-${tab}`);
    button.addEventListener("click", () => select(tab));
    button.addEventListener("keydown", (event) => {
      let next = null;
      if (event.key === "ArrowRight") next = TABS[(at + 1) % TABS.length];
      if (event.key === "ArrowLeft") next = TABS[(at + TABS.length - 1) % TABS.length];
      if (event.key === "Home") next = TABS[0];
      if (event.key === "End") next = TABS[TABS.length - 1];
      if (next) {
        event.preventDefault();
        select(next, true);
      }
    });
  });
}

const CONNECTION = { connecting: "connecting…", live: "", offline: "offline, reconnecting…" };

on("connection", (state) => {
  const note = $("conn");
  note.textContent = CONNECTION[state] || "";
  note.dataset.state = state;
});

on("status", (status) => {
  $("conn").title = `${status.messages} messages · view ${Math.round((status.view_bytes || 0) / 1024)} KB`;
});

async function start() {
  const refused = await trade();
  const newest = fetchNewest({ locks: false }); // beside /api/me: the first page is drawn once the app shows
  newest.catch(() => {}); // a refusal is said by /api/me's answer below
  let me;
  try {
    me = await api("/api/me", { locks: false });
  } catch (error) {
    if (!store.locked) showLocked(refused || (error.status === 401 ? "" : `The server did not answer: ${error.message}.`));
    return;
  }
  store.me = me;
  showMe(me);
  document.title = me.demo ? "Everchat (demo)" : "Everchat";
  $("starting").hidden = true;
  $("locked").hidden = true;
  $("app").hidden = false;
  tabs();
  resumeFrom(savedPosition());
  connect();
  try {
    await loadNewest(newest);
  } catch (error) {
    if (error.status !== 401) $("older").textContent = `The chat did not load: ${error.message}`;
  }
  $("composer-text").focus({ preventScroll: true });
  api("/api/status").then((status) => {
    store.status = status;
    showStatus(status);
  }).catch(() => {});
  api("/api/goal").then(({ goal }) => { // issue 13: a goal kept from before is shown
    if (goal) notice(goal.state === "paused"
      ? `◎ goal (paused: ${goal.detail}; send a message to go on, /halt drops it): ${goal.text}`
      : `◎ goal (${goal.turns} turns in a row so far; /halt drops it): ${goal.text}`,
    goal.state === "paused" ? "warning" : "info");
  }).catch(() => {});
}

// A link opened in a tab that shows the page already (a locked one, say) only changes the
// fragment: start again with it.
window.addEventListener("hashchange", () => {
  if (location.hash.length > 1) location.reload();
});

start();
