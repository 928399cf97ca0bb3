import assert from "node:assert/strict";
import { test } from "node:test";

import { normalizeSettings, withoutToken } from "../lib/settings.js";
import { exportSettingsText, importSettingsText } from "../lib/settings_file.js";

const mine = normalizeSettings({
  serverUrl: "http://mem.local:8765",
  token: "secret-token-123",
  rounds: 7,
  agents: [{ name: "kite", color: "#111111" }, { name: "heron", color: "#222222" }],
  selectorPacks: { "chat.example.com": { input: ["textarea#q"] } },
});

test("the export file holds every setting except the token", () => {
  const text = exportSettingsText(mine);
  assert.ok(!text.includes("secret-token-123"));
  const file = JSON.parse(text);
  assert.equal(file.kind, "chorus-settings");
  assert.equal(file.version, 1);
  assert.ok(!("token" in file.settings));
  assert.deepEqual(file.settings, withoutToken(mine));
  assert.deepEqual(file.settings.selectorPacks, { "chat.example.com": { input: ["textarea#q"] } });
});

test("import restores the settings and keeps the current token, even when the file carries one", () => {
  const { settings, ignored } = importSettingsText(exportSettingsText(mine), "current-token");
  assert.deepEqual(settings, { ...mine, token: "current-token" });
  assert.deepEqual(ignored, []);
  const file = JSON.parse(exportSettingsText(mine));
  file.settings.token = "planted";
  file.settings.future = 1;
  const again = importSettingsText(JSON.stringify(file), "current-token");
  assert.equal(again.settings.token, "current-token");
  assert.deepEqual(again.ignored, ["token", "future"]);
});

test("import goes through normalizeSettings: values clamped, bad selector packs refused with their place", () => {
  const file = JSON.parse(exportSettingsText(mine));
  file.settings.rounds = 99;
  assert.equal(importSettingsText(JSON.stringify(file)).settings.rounds, 20);
  file.settings.selectorPacks = { "chat.example.com": { inputs: ["textarea"] } };
  assert.throws(() => importSettingsText(JSON.stringify(file)), /the file's selector pack "chat.example.com": unknown key "inputs"/);
});

test("files that are not Chorus settings are refused with the fix", () => {
  assert.throws(() => importSettingsText("not json"), /the file is not JSON .*choose a file made by Export settings/);
  assert.throws(() => importSettingsText('{"rounds": 3}'), /not a Chorus settings file \(expected "kind": "chorus-settings"\)/);
  assert.throws(() => importSettingsText('{"kind": "chorus-settings", "version": 9, "settings": {}}'), /version 9 is not supported/);
});
