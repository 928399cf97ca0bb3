// Chorus side panel: settings, agent <-> tab assignment, firing, per-tab status and the round log.
// The exchange loop (lib/loop.js) runs here, in the panel page.
import { ExchangeLoop } from "./lib/loop.js";
import { DEFAULT_CHECK_TEMPLATE, DEFAULT_CHORUS_TEMPLATE } from "./lib/prompts.js";
import { DEFAULTS, normalizeSettings, unreadUrl } from "./lib/settings.js";

const $ = (id) => document.getElementById(id);
let settings = { ...DEFAULTS };
let assignments = {}; // agent name -> tab id
let loop = null;
const tabStates = {};
let currentAgent = null; // for state reports arriving from content scripts

async function load() {
  const stored = await chrome.storage.local.get(["settings", "assignments"]);
  settings = normalizeSettings(stored.settings);
  assignments = stored.assignments || {};
  $("server-url").value = settings.serverUrl;
  $("token").value = settings.token;
  $("rounds").value = settings.rounds;
  $("quiet-ms").value = settings.quietMs;
  $("ceiling-ms").value = settings.ceilingMs;
  $("chorus-template").value = settings.chorusTemplate || DEFAULT_CHORUS_TEMPLATE;
  $("check-template").value = settings.checkTemplate || DEFAULT_CHECK_TEMPLATE;
  $("origin").textContent = location.origin;
  await renderAgents();
}

async function save() {
  settings = normalizeSettings({
    ...settings,
    serverUrl: $("server-url").value,
    token: $("token").value,
    rounds: $("rounds").value,
    quietMs: $("quiet-ms").value,
    ceilingMs: $("ceiling-ms").value,
    chorusTemplate: $("chorus-template").value,
    checkTemplate: $("check-template").value,
  });
  await chrome.storage.local.set({ settings, assignments });
  $("saved").textContent = "saved";
}

async function renderAgents() {
  const tabs = await chrome.tabs.query({});
  const own = location.href;
  const box = $("agents");
  box.replaceChildren();
  for (const agent of settings.agents) {
    const row = document.createElement("div");
    row.className = "agent";
    row.style.setProperty("--color", agent.color);
    const name = document.createElement("span");
    name.className = "name";
    name.textContent = agent.name;
    const select = document.createElement("select");
    select.dataset.agent = agent.name;
    select.setAttribute("aria-label", `tab for ${agent.name}`);
    select.append(new Option("(no tab)", ""));
    for (const tab of tabs) {
      if (!tab.url || tab.url === own || tab.url.startsWith("chrome")) continue;
      const option = new Option(`${tab.title || tab.url}`, String(tab.id));
      option.selected = assignments[agent.name] === tab.id;
      select.append(option);
    }
    select.addEventListener("change", async () => {
      assignments[agent.name] = select.value ? Number(select.value) : undefined;
      await chrome.storage.local.set({ assignments });
    });
    const color = document.createElement("input");
    color.type = "color";
    color.value = agent.color;
    color.setAttribute("aria-label", `colour for ${agent.name}`);
    color.addEventListener("change", async () => {
      agent.color = color.value;
      row.style.setProperty("--color", agent.color);
      await chrome.storage.local.set({ settings });
    });
    row.append(name, select, color);
    box.append(row);
  }
  renderStatus();
}

function renderStatus() {
  const list = $("status");
  list.replaceChildren();
  for (const agent of settings.agents) {
    const li = document.createElement("li");
    li.dataset.agent = agent.name;
    const state = tabStates[agent.name] || "idle";
    const badge = document.createElement("span");
    badge.className = `state ${state.replace(" ", "-")}`;
    badge.textContent = state;
    li.append(`${agent.name}`, badge);
    list.append(li);
  }
}

function log(entry) {
  const li = document.createElement("li");
  const parts = [entry.round !== undefined ? `round ${entry.round}` : "", entry.event];
  if (entry.results) parts.push(entry.results.map((r) => `${r.agent}: ${r.status}`).join(", "));
  if (entry.reason) parts.push(entry.reason);
  if (entry.source) parts.push(`(${entry.source})`);
  li.textContent = parts.filter(Boolean).join(" · ");
  li.dataset.event = entry.event;
  $("log").append(li);
  console.debug("chorus", entry.event, entry.round ?? ""); // never the token, never page text
}

async function sendToTab(tabId, text) {
  await chrome.scripting.executeScript({ target: { tabId }, files: ["selectors.js", "content.js"] });
  return chrome.tabs.sendMessage(tabId, {
    type: "chorus-send",
    text,
    quietMs: settings.quietMs,
    ceilingMs: settings.ceilingMs,
  });
}

async function unread() {
  if (!settings.serverUrl || !settings.token) return null;
  try {
    const response = await fetch(unreadUrl(settings.serverUrl), {
      headers: { Authorization: `Bearer ${settings.token}` },
      cache: "no-store",
    });
    if (!response.ok) return null;
    return (await response.json()).unread || null;
  } catch {
    return null;
  }
}

async function fire() {
  await save();
  const agents = settings.agents
    .filter((a) => assignments[a.name] !== undefined && assignments[a.name] !== null)
    .map((a) => ({ name: a.name, tabId: assignments[a.name] }));
  $("log").replaceChildren();
  try {
    loop = new ExchangeLoop({
      agents,
      rounds: settings.rounds,
      send: (tabId, text) => sendToTab(tabId, text),
      unread,
      log,
      onTabState: (agent, state) => {
        tabStates[agent] = state;
        renderStatus();
      },
      templates: { chorus: settings.chorusTemplate, check: settings.checkTemplate },
    });
  } catch (error) {
    log({ event: "error", reason: error.message });
    return;
  }
  $("fire").disabled = true;
  $("stop").disabled = false;
  try {
    await loop.run($("message").value);
  } catch (error) {
    log({ event: "error", reason: error.message });
  } finally {
    $("fire").disabled = false;
    $("stop").disabled = true;
  }
}

chrome.runtime.onMessage.addListener((message, sender) => {
  if (message?.type !== "chorus-tab-state" || !sender.tab) return;
  const agent = Object.keys(assignments).find((name) => assignments[name] === sender.tab.id);
  if (agent) {
    tabStates[agent] = message.state;
    renderStatus();
  }
});

$("fire").addEventListener("click", fire);
$("stop").addEventListener("click", () => loop?.stop());
$("save").addEventListener("click", save);
$("refresh-tabs").addEventListener("click", renderAgents);
$("add-agent").addEventListener("click", async () => {
  const name = $("new-agent").value.trim().toLowerCase();
  if (!name || settings.agents.some((a) => a.name === name)) return;
  settings.agents.push({ name, color: "#9333ea" });
  $("new-agent").value = "";
  await chrome.storage.local.set({ settings });
  await renderAgents();
});
load();
