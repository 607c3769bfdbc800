// Settings: the connection and models (api or a subscription through a CLI, the reply and
// summary models and their efforts are saved to config.toml by POST /api/settings and apply
// at the next start), the theme, the
// sessions (revoke), and pairing another device (a single-use link and its QR code, drawn by
// the server).

import { api, store } from "./api.js";
import { $, clear, copyText, h, showError } from "./dom.js";

const THEME = "everchat-theme";

function when(iso) {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? "" : date.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
}

export function showMe(me, force = false) {
  $("demo-note").hidden = !me.demo;
  const facts = $("models");
  clear(facts);
  const models = me.models || {};
  const rows = [
    ["This browser", (me.session && me.session.name) || ""],
    ["Chat folder", me.chat || ""],
    ["Connection in use", connectionText(models)],
    ["Reply model in use", modelText(models, models.reply)],
    ["Reply effort", models.reply_effort || models.effort || "default"],
    ["Summary model in use", modelText(models, models.summary)],
    ["Summary effort", models.summary_effort || "default"],
    ["Everchat", me.version || ""],
  ];
  for (const [term, value] of rows) facts.append(h("dt", { text: term }), h("dd", { text: String(value) }));
  fillModels(me, force);
}

// ---- models (saved to config.toml; they apply when `everchat web` starts again) ---------

const MODEL_FIELDS = {
  connection: "set-connection", cli: "set-cli",
  reply_model: "set-reply-model", reply_effort: "set-reply-effort",
  summary_model: "set-summary-model", summary_effort: "set-summary-effort",
};

function connectionText(models) {
  return models.connection === "subscription" ? `subscription (${models.cli})` : "API";
}

// Under a subscription a model left unnamed is the CLI's own default.
function modelText(models, name) {
  return name || (models.connection === "subscription" ? "the CLI's default" : "");
}
let shown = {}; // the form's values as last filled: only what differs from them is sent

function efforts(select, allowed, value) {
  clear(select);
  select.append(h("option", { value: "", text: "the model's own default" }));
  for (const effort of allowed) select.append(h("option", { value: effort, text: effort }));
  if (value && !allowed.includes(value)) select.append(h("option", { value, text: value }));
  select.value = value || "";
}

function pendingText(me) {
  const saved = me.saved_models;
  if (!saved) return "";
  const effort = (value) => value || "default effort";
  const through = saved.connection === "subscription" ? ` through ${connectionText(saved)}` : "";
  let text = "Saved. The new models apply when `everchat web` starts again. Next start: " +
    `replies from ${modelText(saved, saved.reply)} (${effort(saved.reply_effort)}), ` +
    `summaries from ${modelText(saved, saved.summary)} (${effort(saved.summary_effort)})${through}.`;
  if (me.demo) text += " The demo models stay in use while no API key is set.";
  return text;
}

function edited() {
  return Object.entries(MODEL_FIELDS).some(([field, id]) => $(id).value !== (shown[field] ?? $(id).value));
}

// Fills the form from /api/me, unless the person is editing it (a tab switch keeps the edit).
function fillModels(me, force = false) {
  if (!force && edited()) return;
  const models = { ...(me.models || {}), ...(me.saved_models || {}) };
  const allowed = me.efforts || [];
  shown = {
    connection: models.connection || "api", cli: models.cli || "claudecode",
    reply_model: models.reply || "", reply_effort: models.reply_effort || "",
    summary_model: models.summary || "", summary_effort: models.summary_effort || "",
  };
  $("set-connection").value = shown.connection;
  $("set-cli").value = shown.cli;
  cliChoice();
  $("set-reply-model").value = shown.reply_model;
  $("set-summary-model").value = shown.summary_model;
  efforts($("set-reply-effort"), allowed, shown.reply_effort);
  efforts($("set-summary-effort"), allowed, shown.summary_effort);
  const pending = pendingText(me);
  $("models-saved").textContent = pending;
  $("models-saved").hidden = !pending;
}

async function saveModels(event) {
  event.preventDefault();
  const error = $("models-error");
  const button = $("models-save");
  const changes = {};
  for (const [field, id] of Object.entries(MODEL_FIELDS)) {
    const value = $(id).value;
    if (value !== shown[field]) changes[field] = value;
  }
  // A subscription is saved with its CLI, whichever was shown.
  if (changes.connection === "subscription") changes.cli = $("set-cli").value;
  if (Object.keys(changes).length === 0) {
    showError(error, "Nothing changed.");
    return;
  }
  button.disabled = true;
  try {
    await api("/api/settings", { method: "POST", json: changes });
    showError(error, "");
    store.me = await api("/api/me");
    showMe(store.me, true);
  } catch (failure) {
    if (failure.status !== 401) showError(error, `Not saved: ${failure.message}`);
  } finally {
    button.disabled = false;
  }
}

// The CLI is a choice only under a subscription, where an unnamed model is the CLI's own.
function cliChoice() {
  const subscription = $("set-connection").value === "subscription";
  $("set-cli").disabled = !subscription;
  for (const id of ["set-reply-model", "set-summary-model"]) $(id).placeholder = subscription ? "the CLI's default" : "";
}

$("models-form").addEventListener("submit", saveModels);
$("set-connection").addEventListener("change", cliChoice);

// ---- theme -----------------------------------------------------------------------------

function applyTheme(choice) {
  if (choice === "light" || choice === "dark") document.documentElement.setAttribute("data-theme", choice);
  else document.documentElement.removeAttribute("data-theme");
}

function savedTheme() {
  try {
    return localStorage.getItem(THEME) || "system";
  } catch (error) {
    return "system";
  }
}

for (const radio of document.querySelectorAll('input[name="theme"]')) {
  radio.checked = radio.value === savedTheme();
  radio.addEventListener("change", () => {
    if (!radio.checked) return;
    try {
      localStorage.setItem(THEME, radio.value);
    } catch (error) {
      // not saved; this page still shows it
    }
    applyTheme(radio.value);
  });
}

// ---- sessions --------------------------------------------------------------------------

export async function loadSessions() {
  const list = $("sessions");
  const error = $("sessions-error");
  try {
    const answer = await api("/api/sessions");
    showError(error, "");
    clear(list);
    // A paired device may end only its own session, and pairs no other (docs/WEB.md).
    const paired = answer.sessions.some((session) => session.current && session.paired);
    $("pair").hidden = paired;
    $("pair-paired").hidden = !paired;
    for (const session of answer.sessions) {
      let revoke = null;
      if (!paired || session.current) {
        revoke = h("button", { type: "button", class: "danger",
          "aria-label": `Revoke ${session.name}${session.current ? " (this browser)" : ""}`, text: "Revoke" });
        revoke.addEventListener("click", () => revokeSession(session, revoke));
      }
      list.append(h("li", { class: session.current ? "session current" : "session" },
        h("div", {},
          h("strong", { text: session.name || session.id }),
          session.current ? h("span", { class: "tag", text: "this browser" }) : null,
          h("p", { class: "muted", text: `since ${when(session.created)} · last seen ${when(session.last_seen)}` })),
        revoke));
    }
  } catch (failure) {
    if (failure.status !== 401) showError(error, `The sessions did not load: ${failure.message}`);
  }
}

async function revokeSession(session, button) {
  if (session.current && !window.confirm("Revoke this browser's own session? This page locks until you open the link again.")) {
    return;
  }
  button.disabled = true;
  try {
    await api(`/api/sessions/${encodeURIComponent(session.id)}`, { method: "DELETE" });
    await loadSessions();
  } catch (failure) {
    button.disabled = false;
    if (failure.status !== 401) showError($("sessions-error"), `Not revoked: ${failure.message}`);
  }
}

// ---- pairing ---------------------------------------------------------------------------

// The QR code is the server's SVG; it becomes an <img> from a data: URL, so it is never
// parsed into this page's document.
function svgUrl(text) {
  const bytes = new TextEncoder().encode(text);
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return `data:image/svg+xml;base64,${btoa(binary)}`;
}

let expiryTimer = null;

async function pair() {
  const error = $("pair-error");
  const button = $("pair");
  button.disabled = true;
  try {
    const answer = await api("/api/pair", { method: "POST", json: {} });
    showError(error, "");
    $("pair-qr").src = svgUrl(answer.qr_svg || "");
    $("pair-link").value = answer.link;
    const expires = new Date(answer.expires);
    const say = () => {
      const left = Math.round((expires.getTime() - Date.now()) / 60000);
      $("pair-expiry").textContent = left > 0 ?
        `Single use; valid until ${expires.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" })} ` +
        `(about ${left} minute${left === 1 ? "" : "s"}).` : "This link has expired: make a new one.";
    };
    say();
    clearInterval(expiryTimer);
    expiryTimer = setInterval(say, 30000);
    const host = new URL(answer.link).hostname;
    $("pair-reach").hidden = !["127.0.0.1", "localhost", "[::1]", "::1"].includes(host);
    $("pairing").hidden = false;
    button.textContent = "Make a new pairing link";
  } catch (failure) {
    if (failure.status !== 401) showError(error, `No pairing link: ${failure.message}`);
  } finally {
    button.disabled = false;
  }
}

$("pair").addEventListener("click", pair);
$("pair-copy").addEventListener("click", async () => {
  const done = await copyText($("pair-link").value);
  $("pair-copy").textContent = done ? "Copied" : "Copy failed";
  setTimeout(() => { $("pair-copy").textContent = "Copy link"; }, 1500);
});

export function openSettings() {
  if (store.me) showMe(store.me);
  loadSessions();
}
