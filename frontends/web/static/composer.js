// Writing a message: Enter sends, Shift+Enter is a new line; images by the button, paste or
// drag and drop (uploaded at once, sent by digest, R9); Stop and Esc end the running turn (R37).

import { api, on, store } from "./api.js";
import { notice, sent } from "./chat.js";
import { $, h, showError } from "./dom.js";

const MAX_TEXT = 1024 * 1024; // the page's message limit (docs/WEB.md)
const MAX_IMAGE = 5 * 1024 * 1024; // R9
const TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];

const form = $("composer");
const area = $("composer-text");
const fileInput = $("file");
const previews = $("previews");
const error = $("composer-error");
const stopButton = $("stop");
const sendButton = $("send");
const chatPanel = $("panel-chat");

let attached = []; // {file, url, digest: Promise<string>, row}
let sending = false;

function grow() {
  if (!area.value) {
    area.style.height = "";
    return;
  }
  area.style.height = "auto";
  area.style.height = `${Math.min(area.scrollHeight, Math.round(window.innerHeight * 0.4))}px`;
}

function attach(files) {
  for (const file of files) {
    if (!TYPES.includes(file.type)) {
      showError(error, `${file.name || "That file"} is not a PNG, JPEG, GIF or WebP image.`);
      continue;
    }
    if (file.size > MAX_IMAGE) {
      showError(error, `${file.name || "That image"} is over 5 MB.`);
      continue;
    }
    showError(error, "");
    const item = { file, url: URL.createObjectURL(file) };
    item.digest = api("/api/asset", { method: "POST", body: file, headers: { "Content-Type": file.type } })
      .then((answer) => answer.digest);
    item.digest.catch((failure) => {
      showError(error, `The image did not upload: ${failure.message}`);
      remove(item);
    });
    const number = attached.length + 1;
    const removeButton = h("button", { type: "button", class: "remove", "aria-label": `Remove image ${number}`,
      text: "×" });
    item.row = h("li", { class: "preview" },
      h("img", { src: item.url, alt: `Image ${number} to send${file.name ? ": " + file.name : ""}` }),
      removeButton);
    removeButton.addEventListener("click", () => {
      remove(item);
      area.focus();
    });
    attached.push(item);
    previews.append(item.row);
  }
  previews.hidden = attached.length === 0;
}

function remove(item) {
  if (!attached.includes(item)) return;
  attached = attached.filter((other) => other !== item);
  item.row.remove();
  URL.revokeObjectURL(item.url);
  attached.forEach((other, at) => {
    other.row.querySelector(".remove").setAttribute("aria-label", `Remove image ${at + 1}`);
    other.row.querySelector("img").alt = `Image ${at + 1} to send`;
  });
  previews.hidden = attached.length === 0;
}

async function send() {
  if (sending) return;
  const text = area.value;
  if (!text.trim() && attached.length === 0) return;
  if (new TextEncoder().encode(text).length > MAX_TEXT) {
    showError(error, "The message is over 1 MB: attach less, or send it in parts.");
    return;
  }
  const stopAgent = /^\/stop\s+(\S+)\s*$/.exec(text);
  if (stopAgent && attached.length === 0) { // R38: `/stop NAME` ends that agent's call and its jobs
    try {
      await api("/api/stop", { method: "POST", json: { agent: stopAgent[1] } });
      area.value = "";
      grow();
    } catch (failure) {
      if (failure.status !== 401) showError(error, `Could not stop ${stopAgent[1]}: ${failure.message}`);
    }
    return;
  }
  const goal = /^\/(goal|halt)(?:\s+([\s\S]*))?$/.exec(text);
  if (goal && attached.length === 0) { // issue 13: the chat's actors keep the goal's loop
    await goalCommand(goal[1], (goal[2] || "").trim());
    return;
  }
  sending = true;
  sendButton.disabled = true;
  showError(error, "");
  const items = attached.slice();
  try {
    const digests = await Promise.all(items.map((item) => item.digest));
    const answer = await api("/api/send", { method: "POST", json: { text, images: digests } });
    if (area.value === text) area.value = "";
    for (const item of items) remove(item);
    grow();
    sent({ id: answer.id, kind: "user", text, date: new Date().toISOString(), images: digests });
  } catch (failure) {
    if (failure.status !== 401) showError(error, `Not sent: ${failure.message}`);
  } finally {
    sending = false;
    sendButton.disabled = false;
  }
}

async function goalCommand(command, text) {
  try {
    if (command === "halt") {
      await api("/api/halt", { method: "POST", json: {} });
    } else if (!text) { // `/goal` alone: show it
      const answer = await api("/api/goal");
      const goal = answer.goal;
      if (goal) notice(`◎ goal (${goal.state}${goal.detail ? ": " + goal.detail : ""}): ${goal.text}`,
        goal.state === "paused" ? "warning" : "info");
      else notice("No goal: /goal TEXT sets one.");
    } else {
      const answer = await api("/api/goal", { method: "POST", json: { text } });
      sent({ id: answer.id, kind: "user", text, date: new Date().toISOString(), images: [] });
    }
    area.value = "";
    grow();
  } catch (failure) {
    if (failure.status !== 401) showError(error, `/${command}: ${failure.message}`);
  }
}

async function stop() {
  try {
    await api("/api/stop", { method: "POST", json: {} });
  } catch (failure) {
    if (failure.status !== 401) showError(error, `Could not stop: ${failure.message}`);
  }
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  send();
});

area.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing && !event.altKey && !event.ctrlKey) {
    event.preventDefault();
    send();
  }
});
area.addEventListener("input", grow);

document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && store.running && !chatPanel.hidden) {
    event.preventDefault();
    stop();
  }
});

$("attach").addEventListener("click", () => fileInput.click());
fileInput.addEventListener("change", () => {
  attach(Array.from(fileInput.files || []));
  fileInput.value = "";
});

area.addEventListener("paste", (event) => {
  const files = Array.from((event.clipboardData && event.clipboardData.files) || [])
    .filter((file) => file.type.startsWith("image/"));
  if (files.length) {
    event.preventDefault();
    attach(files);
  }
});

chatPanel.addEventListener("dragover", (event) => {
  if (event.dataTransfer && Array.from(event.dataTransfer.types).includes("Files")) {
    event.preventDefault();
    chatPanel.classList.add("dropping");
  }
});
chatPanel.addEventListener("dragleave", (event) => {
  if (event.target === chatPanel || !chatPanel.contains(event.relatedTarget)) chatPanel.classList.remove("dropping");
});
chatPanel.addEventListener("drop", (event) => {
  chatPanel.classList.remove("dropping");
  const files = Array.from((event.dataTransfer && event.dataTransfer.files) || []);
  if (files.length) {
    event.preventDefault();
    attach(files);
    area.focus();
  }
});

stopButton.addEventListener("click", stop);

on("running", (running) => {
  stopButton.hidden = !running;
  $("working").hidden = !running;
});

previews.hidden = true;
