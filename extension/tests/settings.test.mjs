import assert from "node:assert/strict";
import { test } from "node:test";

import { DEFAULTS, normalizeSettings, unreadUrl } from "../lib/settings.js";

test("defaults: seed timings and rounds, agents as editable settings", () => {
  const s = normalizeSettings(undefined);
  assert.equal(s.rounds, 3);
  assert.equal(s.quietMs, 5000);
  assert.equal(s.ceilingMs, 90000);
  assert.deepEqual(s.agents.map((a) => a.name), ["kite", "wren"]);
  assert.equal(DEFAULTS.token, "");
});

test("stored values are cleaned and clamped", () => {
  const s = normalizeSettings({ serverUrl: " http://x:1/ ", rounds: "99", quietMs: "abc", ceilingMs: 10,
    agents: [{ name: " Heron ", color: "red" }, { name: "heron" }, { name: "" }] });
  assert.equal(s.serverUrl, "http://x:1");
  assert.equal(s.rounds, 20);
  assert.equal(s.quietMs, 5000);
  assert.equal(s.ceilingMs, 1000);
  assert.deepEqual(s.agents, [{ name: "heron", color: "#2563eb" }]);
});

test("the unread endpoint is derived from the server URL (with or without /mcp)", () => {
  assert.equal(unreadUrl("http://127.0.0.1:8765"), "http://127.0.0.1:8765/amq/unread");
  assert.equal(unreadUrl("https://mem.example/mcp/"), "https://mem.example/amq/unread");
  assert.throws(() => unreadUrl("ftp://x"), /http/);
});
