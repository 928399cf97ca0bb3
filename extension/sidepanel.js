// Chorus side panel: settings, agent <-> tab assignment, firing, per-tab status and the round log, "Check this tab",
// settings export/import. The exchange loop (lib/loop.js) runs here, in the panel page.
// selectors.js is loaded before this module as a classic script: packForHost and CHORUS_SELECTOR_PACKS are globals.
import { ExchangeLoop } from "./lib/loop.js";
import { packsText, parsePacksText } from "./lib/packs.js";
import { DEFAULT_CHECK_TEMPLATE, DEFAULT_CHORUS_TEMPLATE } from "./lib/prompts.js";
import { DEFAULTS, normalizeSettings, unreadUrl } from "./lib/settings.js";
import { exportSettingsText, importSettingsText } from "./lib/settings_file.js";
import { loadSettings, saveAssignments, saveSettings } from "./lib/storage.js";

const $ = (id) => document.getElementById(id);
let settings = { ...DEFAULTS };
let assignments = {}; // agent name -> tab id
let loop = null;
const tabStates = {};
let currentAgent = null; // for state reports arriving from content scripts

const CHECK_LABELS = {
  input: "input",
  submit: "submit",
  responseContainer: "response container",
  streamingIndicator: "streaming indicator",
};

async function load() {
  const stored = await loadSettings(chrome.storage);
  settings = stored.settings;
  assignments = stored.assignments;
  fillSettingsForm();
  if (stored.problem) showSaved(stored.problem, "error");
  $("origin").textContent = location.origin;
  $("builtin-packs").textContent = Object.keys(CHORUS_SELECTOR_PACKS).join(", ");
  await renderAgents();
}

function fillSettingsForm() {
  $("server-url").value = settings.serverUrl;
  $("token").value = settings.token;
  $("rounds").value = settings.rounds;
  $("quiet-ms").value = settings.quietMs;
  $("ceiling-ms").value = settings.ceilingMs;
  $("chorus-template").value = settings.chorusTemplate || DEFAULT_CHORUS_TEMPLATE;
  $("check-template").value = settings.checkTemplate || DEFAULT_CHECK_TEMPLATE;
  $("selector-packs").value = packsText(settings.selectorPacks);
}

function showSaved(text, state = "ok") {
  $("saved").textContent = text;
  $("saved").dataset.state = state;
  $("saved").classList.toggle("error", state === "error");
}

/** Saves the form; false (with the reason shown next to the button) when the selector packs are unusable. */
async function save() {
  let selectorPacks;
  try {
    selectorPacks = parsePacksText($("selector-packs").value);
  } catch (error) {
    showSaved(`not saved: ${error.message}`, "error");
    return false;
  }
  settings = normalizeSettings({
    ...settings,
    serverUrl: $("server-url").value,
    token: $("token").value,
    rounds: $("rounds").value,
    quietMs: $("quiet-ms").value,
    ceilingMs: $("ceiling-ms").value,
    chorusTemplate: $("chorus-template").value,
    checkTemplate: $("check-template").value,
    selectorPacks,
  });
  const area = await saveSettings(chrome.storage, settings);
  await saveAssignments(chrome.storage, assignments);
  showSaved(area === "sync" ? "saved" : "saved (in this browser only: sync storage refused it)");
  return true;
}

function exportSettings() {
  const url = URL.createObjectURL(new Blob([exportSettingsText(settings)], { type: "application/json" }));
  const link = document.createElement("a");
  link.href = url;
  link.download = "chorus-settings.json";
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

async function importSettings(file) {
  const result = $("import-result");
  result.classList.remove("error");
  try {
    const imported = importSettingsText(await file.text(), settings.token);
    settings = imported.settings;
    fillSettingsForm();
    await saveSettings(chrome.storage, settings);
    await renderAgents();
    const ignored = imported.ignored.length ? ` (ignored from the file: ${imported.ignored.join(", ")})` : "";
    result.textContent = `imported ${file.name}; the token was kept${ignored}`;
    result.dataset.state = "ok";
  } catch (error) {
    result.textContent = `not imported: ${error.message}`;
    result.dataset.state = "error";
    result.classList.add("error");
  }
}

/** The selector pack for a tab: by its host, the user's packs merged over the built-in ones. */
function packForTab(tab) {
  let host = "";
  try {
    host = new URL(tab.url).hostname;
  } catch {
    /* no URL (a tab the extension may not read): the generic pack */
  }
  return packForHost(host, settings.selectorPacks);
}

async function injectInto(tabId) {
  await chrome.scripting.executeScript({ target: { tabId }, files: ["selectors.js", "content.js"] });
}

/** "Check this tab": which selector of each chain matches on the agent's tab, shown in #check-result. */
async function checkTab(agentName) {
  const section = $("check-section");
  const title = $("check-title");
  const list = $("check-result");
  section.hidden = false;
  list.replaceChildren();
  list.dataset.agent = agentName;
  list.dataset.state = "checking";
  title.classList.remove("error");
  const tabId = assignments[agentName];
  try {
    if (tabId === undefined || tabId === null) throw new Error(`assign a tab to ${agentName} first`);
    const tab = await chrome.tabs.get(tabId);
    const { name, custom, pack } = packForTab(tab);
    title.textContent = `${agentName}: checking ${tab.title || tab.url}…`;
    await injectInto(tabId);
    const report = await chrome.tabs.sendMessage(tabId, { type: "chorus-check", selectors: pack });
    title.textContent = `${agentName} · ${report.host || "this tab"} · pack "${name}"${custom ? " (with your changes)" : ""}`;
    for (const key of Object.keys(CHECK_LABELS)) list.append(checkLine(key, report.results[key]));
    list.dataset.state = "done";
  } catch (error) {
    title.textContent = `${agentName}: could not check the tab: ${error.message}`;
    title.classList.add("error");
    list.dataset.state = "error";
  }
}

function checkLine(key, found) {
  const li = document.createElement("li");
  li.dataset.key = key;
  if (found.index === null) {
    li.dataset.index = "none";
    const why = key === "streamingIndicator" ? " (normal while no reply is being written)" : "";
    li.append(`${CHECK_LABELS[key]}: none of ${found.of} selectors matched${why}`);
    return li;
  }
  li.dataset.index = String(found.index);
  li.dataset.selector = found.selector;
  if (found.index > 0) li.className = "fallback";
  const code = document.createElement("code");
  code.textContent = found.selector;
  const which = found.index === 0 ? "the first selector" : `fallback #${found.index + 1} of ${found.of}`;
  li.append(`${CHECK_LABELS[key]}: ${which} `, code);
  return li;
}

async function renderAgents() {
  const tabs = await chrome.tabs.query({});
  const own = location.href;
  const open = new Set(tabs.map((tab) => tab.id));
  const closed = Object.keys(assignments).filter((name) => assignments[name] != null && !open.has(assignments[name]));
  if (closed.length) {  // a tab assigned before and closed since: Fire must not send to it
    for (const name of closed) delete assignments[name];
    await saveAssignments(chrome.storage, assignments);
  }
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
      if (!tab.url || tab.url === own || /^(chrome|edge|about|moz-extension|chrome-extension):/.test(tab.url)) continue;
      const option = new Option(`${tab.title || tab.url}`, String(tab.id));
      option.selected = assignments[agent.name] === tab.id;
      select.append(option);
    }
    select.addEventListener("change", async () => {
      assignments[agent.name] = select.value ? Number(select.value) : undefined;
      await saveAssignments(chrome.storage, assignments);
    });
    const color = document.createElement("input");
    color.type = "color";
    color.value = agent.color;
    color.setAttribute("aria-label", `colour for ${agent.name}`);
    color.addEventListener("change", async () => {
      agent.color = color.value;
      row.style.setProperty("--color", agent.color);
      await saveSettings(chrome.storage, settings);
    });
    const check = document.createElement("button");
    check.type = "button";
    check.className = "check";
    check.dataset.checkAgent = agent.name;
    check.textContent = "Check";
    check.title = `Check ${agent.name}'s tab: which selector finds the input, submit button, replies, streaming`;
    check.addEventListener("click", () => checkTab(agent.name));
    row.append(name, select, color, check);
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
  if (entry.results) parts.push(entry.results.map((r) => `${r.agent}: ${r.status}${r.error ? ` (${r.error})` : ""}`).join(", "));
  if (entry.reason) parts.push(entry.reason);
  if (entry.source) parts.push(`(${entry.source})`);
  li.textContent = parts.filter(Boolean).join(" · ");
  li.dataset.event = entry.event;
  $("log").append(li);
  console.debug("chorus", entry.event, entry.round ?? ""); // never the token, never page text
}

async function sendToTab(tabId, text) {
  const { pack } = packForTab(await chrome.tabs.get(tabId));
  await injectInto(tabId);
  return chrome.tabs.sendMessage(tabId, {
    type: "chorus-send",
    text,
    quietMs: settings.quietMs,
    ceilingMs: settings.ceilingMs,
    selectors: pack,
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
  if (!(await save())) {
    log({ event: "error", reason: `settings ${$("saved").textContent}` });
    return;
  }
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
$("export-settings").addEventListener("click", exportSettings);
$("import-file").addEventListener("change", async (event) => {
  const [file] = event.target.files;
  if (file) await importSettings(file);
  event.target.value = ""; // the same file can be chosen again
});
$("refresh-tabs").addEventListener("click", renderAgents);
$("add-agent").addEventListener("click", async () => {
  const name = $("new-agent").value.trim().toLowerCase();
  if (!name || settings.agents.some((a) => a.name === name)) return;
  settings.agents.push({ name, color: "#9333ea" });
  $("new-agent").value = "";
  await saveSettings(chrome.storage, settings);
  await renderAgents();
});
load();
