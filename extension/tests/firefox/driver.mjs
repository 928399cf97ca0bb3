// Drives Chorus in a real Firefox for tests/test_chorus_firefox.py (not a node unit test: it needs Firefox, a
// persmem server and the mock chat pages, which the pytest test starts).
//
//   node tests/firefox/driver.mjs '<setup json>'    then one scenario per stdin line, one result per stdout line
//
// Setup: {firefox, extension (the built dist/firefox folder), uuid, artifacts}. Firefox runs headless, driven over
// WebDriver BiDi by puppeteer-core, which installs the extension (a temporary add-on) and opens the mock chat tabs.
// The add-on's moz-extension UUID is fixed by the extensions.webextensions.uuids pref so the server's
// allowed_origins can name it. Firefox opens the sidebar (sidebar_action) at install; the Chorus page in it, or
// the same page in a tab, is scripted over Firefox's devtools protocol (devtools_client.mjs says why not BiDi).
//
// First stdout line: {"ready": {...}} (browser version, the sidebar's permissions and APIs). Each stdin line
// {name, surface: "sidebar"|"tab", serverUrl, token, mockUrl, rounds, kite, wren, quiet, ceiling, message,
// timeoutMs} is answered by {name, log, states, elapsedMs, screenshots} or {name, error}. EOF closes Firefox.
import { once } from "node:events";
import { writeFileSync } from "node:fs";
import net from "node:net";
import { join } from "node:path";
import readline from "node:readline";
import puppeteer from "puppeteer-core";
import { DevtoolsClient } from "./devtools_client.mjs";

const ADDON_ID = "chorus@persmem";
const AGENTS = ["kite", "wren"];

const setup = JSON.parse(process.argv[2] ?? "{}");
for (const key of ["firefox", "extension", "uuid", "artifacts"]) {
  if (!setup[key]) fail(`driver.mjs: the setup JSON (first argument) needs "${key}"`);
}
const say = (object) => process.stdout.write(JSON.stringify(object) + "\n");
const note = (...parts) => process.stderr.write(`[driver ${new Date().toISOString()}] ${parts.join(" ")}\n`);

function fail(message) {
  process.stderr.write(message + "\n");
  process.exit(2);
}

async function freePort() {
  const server = net.createServer().listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address();
  server.close();
  return port;
}

/** Runs `fn(arg)` inside the Chorus page of `target` and returns what it returns (as JSON, since devtools hands
 *  back objects as remote references). */
async function inPage(devtools, target, fn, arg) {
  const json = await devtools.evaluate(target,
    `Promise.resolve((${fn.toString()})(${JSON.stringify(arg ?? null)})).then((v) => JSON.stringify(v ?? null))`);
  return JSON.parse(json);
}

// ---- functions that run in the Chorus page (sidebar or tab); they only use its DOM, as a user would ----

async function pageInfo() {
  const current = await chrome.tabs.getCurrent();
  return {
    url: location.href,
    inSidebar: chrome.extension.getViews({ type: "sidebar" }).includes(window),
    tabId: current?.id ?? null,
    apis: {
      "tabs.query": typeof chrome.tabs?.query,
      "tabs.sendMessage": typeof chrome.tabs?.sendMessage,
      "scripting.executeScript": typeof chrome.scripting?.executeScript,
      "storage.local": typeof chrome.storage?.local?.get,
      "storage.sync": typeof chrome.storage?.sync?.get,
    },
    permissions: await chrome.permissions.getAll(),
    origin: location.origin,
  };
}

async function startExchange({ serverUrl, token, rounds, quiet, ceiling, message, tabTitles }) {
  const $ = (id) => document.getElementById(id);
  const waitFor = async (check, what, ms = 10000) => {
    const deadline = Date.now() + ms;
    for (;;) {
      const value = check();
      if (value) return value;
      if (Date.now() > deadline) throw new Error(`the Chorus page never showed ${what}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  const fill = (id, value) => {
    const field = $(id);
    if (!field) throw new Error(`the Chorus page has no #${id}`);
    field.value = String(value);
    field.dispatchEvent(new Event("input", { bubbles: true }));
  };
  await waitFor(() => document.querySelector("#status li"), "its status list (page still loading)");
  fill("server-url", serverUrl);
  fill("token", token);
  fill("rounds", rounds);
  fill("quiet-ms", quiet);
  fill("ceiling-ms", ceiling);
  $("saved").textContent = "";
  $("save").click();
  await waitFor(() => $("saved").textContent, '"saved" after Save settings');
  // Refresh re-renders the tab lists; the old ones (listing tabs closed since) must not be the ones picked from.
  for (const select of document.querySelectorAll("select[data-agent]")) select.dataset.beforeRefresh = "1";
  $("refresh-tabs").click();
  for (const [agent, title] of Object.entries(tabTitles)) {
    const option = await waitFor(() => [...(document.querySelector(`select[data-agent="${agent}"]`)?.options ?? [])]
      .find((o) => o.text === title && !o.parentElement.dataset.beforeRefresh), `a tab titled "${title}" to assign to ${agent}`);
    const select = option.parentElement;
    select.value = option.value;
    select.dispatchEvent(new Event("change", { bubbles: true }));
  }
  fill("message", message);
  window.__chorusTest = { startedAt: Date.now(), finishedAt: null };
  new MutationObserver((_, observer) => {
    if (document.querySelector('#log li[data-event="finished"]')) {
      window.__chorusTest.finishedAt = Date.now();
      observer.disconnect();
    }
  }).observe($("log"), { childList: true });
  $("fire").click();
  return true;
}

function exchangeResult() {
  const t = window.__chorusTest;
  if (!t?.finishedAt) return null;
  return {
    elapsedMs: t.finishedAt - t.startedAt,
    log: [...document.querySelectorAll("#log li")].map((li) => li.innerText),
    states: Object.fromEntries([...document.querySelectorAll("#status li[data-agent]")]
      .map((li) => [li.dataset.agent, li.querySelector(".state")?.innerText])),
  };
}

function exchangeSoFar() {
  return {
    log: [...document.querySelectorAll("#log li")].map((li) => li.innerText),
    states: Object.fromEntries([...document.querySelectorAll("#status li[data-agent]")]
      .map((li) => [li.dataset.agent, li.querySelector(".state")?.innerText])),
  };
}

// ---- the browser ----

const rdpPort = await freePort();
const browser = await puppeteer.launch({
  browser: "firefox",
  executablePath: setup.firefox,
  headless: true,
  args: ["--start-debugger-server", String(rdpPort)],
  extraPrefsFirefox: {
    "extensions.webextensions.uuids": JSON.stringify({ [ADDON_ID]: setup.uuid }),
    // The devtools server, for scripting the extension's own pages (only reachable from this machine).
    "devtools.debugger.remote-enabled": true,
    "devtools.chrome.enabled": true,
    "devtools.debugger.prompt-connection": false,
    // Only one mock chat tab can be the selected one; Firefox clamps a background tab's timers to 1 s (and then
    // to a budget), which turns the mock's 40 ms word pacing into minutes. Chromium under Playwright runs with
    // --disable-background-timer-throttling; these prefs give Firefox the same footing.
    "dom.min_background_timeout_value": 4,
    "dom.min_background_timeout_value_without_budget_throttling": 4,
    "dom.timeout.enable_budget_timer_throttling": false,
  },
});
let devtools;
const closeAll = async () => {
  devtools?.close();
  await browser.close().catch(() => {});
};
process.on("SIGTERM", () => closeAll().then(() => process.exit(1)));

async function findPage(targets, test, what, ms = 15000) {
  const deadline = Date.now() + ms;
  let last = [];
  while (Date.now() < deadline) {
    last = [];
    for (const target of targets.values()) {
      if (!target.url?.endsWith("/sidepanel.html")) continue;
      try {
        const info = await inPage(devtools, target, pageInfo); // asked again each time: a page may still be loading
        if (test(info)) return { target, info };
        last.push(info);
      } catch (error) {
        note(`skipping ${target.url}: ${error.message}`); // a document being torn down
      }
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`no ${what} appeared within ${ms} ms (extension documents: ` +
    `${[...targets.values()].map((t) => t.url).join(", ")}; the Chorus pages said ${JSON.stringify(last)})`);
}

async function runScenario(targets, sidebar, params) {
  const tabs = {};
  let panel = sidebar;
  let panelTabId = null;
  try {
    for (const agent of AGENTS) {
      tabs[agent] = await browser.newPage();
      await tabs[agent].goto(`${params.mockUrl}/chat/${agent}?${params[agent] ?? ""}`);
    }
    if (params.surface === "tab") {
      panelTabId = await devtools.evaluate(sidebar.target,
        `chrome.tabs.create({url: chrome.runtime.getURL("sidepanel.html"), active: false}).then((t) => t.id)`);
      panel = await findPage(targets, (info) => info.tabId === panelTabId, "Chorus page in a tab");
    }
    await inPage(devtools, panel.target, startExchange, {
      serverUrl: params.serverUrl, token: params.token, rounds: params.rounds, quiet: params.quiet,
      ceiling: params.ceiling, message: params.message,
      tabTitles: Object.fromEntries(AGENTS.map((agent) => [agent, `Mock chat ${agent}`])),
    });
    const deadline = Date.now() + params.timeoutMs;
    let result = null;
    while (!(result = await inPage(devtools, panel.target, exchangeResult))) {
      if (Date.now() > deadline) {
        const soFar = await inPage(devtools, panel.target, exchangeSoFar);
        throw new Error(`no "finished" in the log within ${params.timeoutMs} ms; so far: ${JSON.stringify(soFar)}`);
      }
      await new Promise((r) => setTimeout(r, 150));
    }
    const screenshots = [];
    const shot = (file) => {
      screenshots.push(join(setup.artifacts, file));
      return join(setup.artifacts, file);
    };
    // The sidebar is narrow and the log is at the bottom: show its last lines in the picture.
    await devtools.evaluate(panel.target, `document.querySelector("#log li:last-child")?.scrollIntoView({block: "end"})`);
    writeFileSync(shot(`firefox-${params.name}-${params.surface}.png`), await devtools.screenshot(panel.target));
    for (const agent of AGENTS) await tabs[agent].screenshot({ path: shot(`firefox-${params.name}-${agent}.png`) });
    return { name: params.name, surface: params.surface, ...result, screenshots };
  } finally {
    for (const page of Object.values(tabs)) await page.close().catch(() => {});
    if (panelTabId !== null) {
      await devtools.evaluate(sidebar.target, `chrome.tabs.remove(${panelTabId})`).catch(() => {});
    }
  }
}

try {
  const addonId = await browser.installExtension(setup.extension);
  devtools = await DevtoolsClient.connect(rdpPort);
  const targets = await devtools.watchAddonDocuments(addonId);
  const sidebar = await findPage(targets, (info) => info.inSidebar,
    "Chorus sidebar (Firefox opens a sidebar_action panel when the add-on is installed)");
  say({ ready: { browser: await browser.version(), addonId, sidebar: sidebar.info } });
  for await (const line of readline.createInterface({ input: process.stdin })) {
    if (!line.trim()) continue;
    const params = { surface: "sidebar", timeoutMs: 60000, ...JSON.parse(line) };
    try {
      say(await runScenario(targets, sidebar, params));
    } catch (error) {
      note(error.stack);
      say({ name: params.name, error: error.message });
    }
  }
} catch (error) {
  note(error.stack);
  say({ error: error.message });
  process.exitCode = 1;
} finally {
  await closeAll();
}
