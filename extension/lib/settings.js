// Chorus settings: defaults, validation, and the server URL helpers (pure, tested with node).
import { validatePacks } from "./packs.js";
import { DEFAULT_CHECK_TEMPLATE, DEFAULT_CHORUS_TEMPLATE } from "./prompts.js";

export const DEFAULTS = Object.freeze({
  serverUrl: "http://127.0.0.1:8765",
  token: "",
  agents: [
    { name: "kite", color: "#2563eb" },
    { name: "wren", color: "#16a34a" },
  ],
  rounds: 3,
  quietMs: 5000,
  ceilingMs: 90000,
  chorusTemplate: DEFAULT_CHORUS_TEMPLATE,
  checkTemplate: DEFAULT_CHECK_TEMPLATE,
  selectorPacks: {}, // the user's selector packs, merged over the built-in ones (see ../selectors.js)
});

const clamp = (value, low, high, fallback) => {
  const n = Number(value);
  return Number.isFinite(n) ? Math.min(high, Math.max(low, Math.round(n))) : fallback;
};

/**
 * Stored settings merged over the defaults, numbers clamped, agent names cleaned, selector packs validated
 * (throws PackError naming the bad pack; everything else is cleaned, never refused).
 */
export function normalizeSettings(stored) {
  const s = { ...DEFAULTS, ...(stored || {}) };
  const agents = Array.isArray(s.agents) ? s.agents : DEFAULTS.agents;
  return {
    serverUrl: String(s.serverUrl || "").trim().replace(/\/+$/, ""),
    token: String(s.token || "").trim(),
    agents: agents
      .map((a) => ({ name: String(a?.name || "").trim().toLowerCase(), color: /^#[0-9a-f]{6}$/i.test(a?.color) ? a.color : "#2563eb" }))
      .filter((a, i, all) => a.name && all.findIndex((b) => b.name === a.name) === i),
    rounds: clamp(s.rounds, 0, 20, DEFAULTS.rounds),
    quietMs: clamp(s.quietMs, 200, 60000, DEFAULTS.quietMs),
    ceilingMs: clamp(s.ceilingMs, 1000, 600000, DEFAULTS.ceilingMs),
    chorusTemplate: String(s.chorusTemplate || DEFAULT_CHORUS_TEMPLATE),
    checkTemplate: String(s.checkTemplate || DEFAULT_CHECK_TEMPLATE),
    selectorPacks: validatePacks(s.selectorPacks),
  };
}

/** The settings with the token left out: what goes to synced storage and into an export file. */
export function withoutToken(settings) {
  const { token: _token, ...rest } = settings;
  return rest;
}

/** The AMQ plugin's unread-count endpoint under the server URL. */
export function unreadUrl(serverUrl) {
  const base = String(serverUrl).trim().replace(/\/+$/, "").replace(/\/mcp$/, "");
  if (!/^https?:\/\//.test(base)) throw new Error("the server URL must start with http:// or https://");
  return `${base}/amq/unread`;
}
