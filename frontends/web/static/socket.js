// The live events (docs/WEB.md, "Live events"): one WebSocket, resumed with after=&run= so a
// reconnect misses nothing and repeats nothing; `reset` when the server cannot resume.

import { emit, lock, store } from "./api.js";

const SAVED = "everchat-events"; // this tab's {run, last}, so a reload resumes too

let socket = null;
let retry = 0;
let timer = null;
let pinger = null;
let stopped = false;

export function savedPosition() {
  try {
    const saved = JSON.parse(sessionStorage.getItem(SAVED) || "null");
    if (saved && typeof saved.run === "string" && Number.isInteger(saved.last)) return saved;
    // saved.turnFrom: the event before the running turn's start, so a reload replays the turn
  } catch (error) {
    // unreadable: start from the live events
  }
  return null;
}

function save() {
  try {
    sessionStorage.setItem(SAVED, JSON.stringify({ run: store.run, last: store.lastEvent, turnFrom: store.turnFrom }));
  } catch (error) {
    // storage refused: a reload then starts from the live events
  }
}

function url() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const params = new URLSearchParams();
  if (store.run !== null) {
    params.set("after", String(store.lastEvent));
    params.set("run", store.run);
  }
  const query = params.toString();
  return `${scheme}//${location.host}/api/events${query ? "?" + query : ""}`;
}

export function connect() {
  stopped = false;
  clearTimeout(timer);
  emit("connection", "connecting");
  const current = new WebSocket(url());
  socket = current;
  current.addEventListener("open", () => {
    retry = 0;
    emit("connection", "live");
    clearInterval(pinger);
    pinger = setInterval(() => {
      if (current.readyState === WebSocket.OPEN) current.send(JSON.stringify({ type: "ping" }));
    }, 25000);
  });
  current.addEventListener("message", (message) => {
    let event;
    try {
      event = JSON.parse(message.data);
    } catch (error) {
      return;
    }
    receive(event);
  });
  current.addEventListener("close", (close) => {
    if (socket !== current) return;
    clearInterval(pinger);
    socket = null;
    if (close.code === 4401) {
      lock("This session was revoked.");
      return;
    }
    if (stopped || store.locked) return;
    emit("connection", "offline");
    const delay = Math.min(10000, 500 * 2 ** retry) * (0.75 + Math.random() / 2);
    retry = Math.min(retry + 1, 6);
    timer = setTimeout(connect, delay);
  });
}

let hello = null; // the last hello frame: its run and last id
let resetDone = false; // a hello from another run reset already; its reset frame is not news

function receive(event) {
  if (event.type === "hello") {
    hello = event;
    resetDone = false;
    if (store.run === null) {
      store.run = event.run;
      store.lastEvent = event.last;
      save();
    } else if (store.run !== event.run) {
      restart();
      resetDone = true;
    }
    return;
  }
  if (event.type === "pong") return;
  if (event.type === "reset") {
    if (!resetDone) restart();
    resetDone = false;
    return;
  }
  resetDone = false;
  if (Number.isInteger(event.id)) {
    if (event.id <= store.lastEvent) return; // seen already
    store.lastEvent = event.id;
  }
  emit("event", event);
  save();
}

// The server could not resume us: go on from its live events, and reload the history.
function restart() {
  if (hello) {
    store.run = hello.run;
    store.lastEvent = hello.last;
    store.turnFrom = null;
    save();
  }
  emit("reset");
}

// Start from where this tab was (a reload), or from the live events. A reload during a turn
// goes back to the turn's start: chat.js skips what the log already holds.
export function resumeFrom(saved) {
  if (saved) {
    store.run = saved.run;
    store.lastEvent = Number.isInteger(saved.turnFrom) ? Math.min(saved.turnFrom, saved.last) : saved.last;
  }
}

export function disconnect() {
  stopped = true;
  clearTimeout(timer);
  clearInterval(pinger);
  if (socket) {
    const closing = socket;
    socket = null;
    closing.close();
  }
}
