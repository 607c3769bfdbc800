// The one small store and the HTTP side of docs/WEB.md. A 401 anywhere locks the page.

export const store = {
  me: null, // GET /api/me
  status: null, // the last status figures
  run: null, // the server's run id (from hello)
  lastEvent: 0, // the last event id applied
  turnFrom: null, // the event id before the running turn's start (null: no turn seen starting)
  running: false, // a turn is on
  locked: false,
  listeners: new Map(),
};

export function on(name, listener) {
  if (!store.listeners.has(name)) store.listeners.set(name, []);
  store.listeners.get(name).push(listener);
}

export function emit(name, detail) {
  for (const listener of store.listeners.get(name) || []) listener(detail);
}

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// A JSON request; the error's words come from the server's {"error": …} when it gave some.
export async function api(path, { method = "GET", json, body, headers = {}, locks = true } = {}) {
  const init = { method, headers: { ...headers }, credentials: "same-origin", cache: "no-store" };
  if (json !== undefined) {
    init.body = JSON.stringify(json);
    init.headers["Content-Type"] = "application/json";
  } else if (body !== undefined) {
    init.body = body;
  }
  let answer;
  try {
    answer = await fetch(path, init);
  } catch (error) {
    throw new ApiError(0, "The server cannot be reached.");
  }
  let data = null;
  try {
    data = await answer.json();
  } catch (error) {
    data = null;
  }
  if (answer.status === 401 && locks) {
    lock("Your session ended (revoked, or the server has a new token).");
    throw new ApiError(401, (data && data.error) || "no session");
  }
  if (!answer.ok) {
    throw new ApiError(answer.status, (data && data.error) || `${answer.status} ${answer.statusText}`);
  }
  return data || {};
}

export function lock(why) {
  if (store.locked) return;
  store.locked = true;
  emit("locked", why);
}

// "Chrome on Linux": what the session list shows for this browser.
export function clientName() {
  const agent = navigator.userAgent || "";
  const brands = [
    ["Edg/", "Edge"], ["OPR/", "Opera"], ["Firefox/", "Firefox"], ["Chrome/", "Chrome"],
    ["Chromium/", "Chromium"], ["Safari/", "Safari"],
  ];
  let browser = "A browser";
  for (const [mark, name] of brands) {
    if (agent.includes(mark)) {
      browser = name;
      break;
    }
  }
  const data = navigator.userAgentData;
  let platform = (data && data.platform) || navigator.platform || "";
  if (/iPhone|iPad/.test(agent)) platform = /iPad/.test(agent) ? "iPad" : "iPhone";
  else if (/Android/.test(agent)) platform = "Android";
  else if (/^Linux/.test(platform)) platform = "Linux";
  else if (/^Mac/.test(platform)) platform = "macOS";
  else if (/^Win/.test(platform)) platform = "Windows";
  return platform ? `${browser} on ${platform}` : browser;
}
