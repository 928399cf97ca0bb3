import assert from "node:assert/strict";
import { test } from "node:test";

import { normalizeSettings } from "../lib/settings.js";
import { loadSettings, saveSettings } from "../lib/storage.js";

/** chrome.storage's two areas as plain maps (the browser test checks the real ones); syncThrows: sync refuses. */
function fakeStorage({ local = {}, sync = {}, syncThrows = false } = {}) {
  const area = (data, throws) => ({
    data,
    async get(keys) {
      if (throws) throw new Error("sync is not available");
      return Object.fromEntries([].concat(keys).filter((k) => k in data).map((k) => [k, structuredClone(data[k])]));
    },
    async set(items) {
      if (throws) throw new Error("QUOTA_BYTES_PER_ITEM quota exceeded");
      Object.assign(data, structuredClone(items));
    },
    async remove(key) {
      delete data[key];
    },
  });
  return { local: area(local, false), sync: area(sync, syncThrows) };
}

test("saving puts the settings in sync without the token, the token in local only", async () => {
  const storage = fakeStorage();
  assert.equal(await saveSettings(storage, normalizeSettings({ token: "tok", rounds: 5 })), "sync");
  assert.equal(storage.sync.data.settings.rounds, 5);
  assert.ok(!("token" in storage.sync.data.settings));
  assert.equal(storage.local.data.token, "tok");
  assert.ok(!("settings" in storage.local.data));
  const loaded = await loadSettings(storage);
  assert.equal(loaded.settings.token, "tok");
  assert.equal(loaded.settings.rounds, 5);
  assert.equal(loaded.area, "sync");
});

test("when sync throws, the settings fall back to local, still without the token inside them", async () => {
  const storage = fakeStorage({ syncThrows: true });
  assert.equal(await saveSettings(storage, normalizeSettings({ token: "tok", rounds: 2 })), "local");
  assert.equal(storage.local.data.settings.rounds, 2);
  assert.ok(!("token" in storage.local.data.settings));
  const loaded = await loadSettings(storage);
  assert.equal(loaded.area, "local");
  assert.deepEqual([loaded.settings.rounds, loaded.settings.token], [2, "tok"]);
});

test("an older Chorus's local settings (token inside) migrate: token to local.token, settings to sync", async () => {
  const storage = fakeStorage({ local: { settings: { token: "old-token", rounds: 4 }, assignments: { kite: 7 } } });
  const loaded = await loadSettings(storage);
  assert.deepEqual([loaded.settings.token, loaded.settings.rounds, loaded.assignments.kite], ["old-token", 4, 7]);
  assert.equal(loaded.area, "sync");
  assert.equal(storage.local.data.token, "old-token");
  assert.ok(!("settings" in storage.local.data));
  assert.equal(storage.sync.data.settings.rounds, 4);
  assert.ok(!("token" in storage.sync.data.settings));
});

test("with sync unavailable the migration still takes the token out of the settings entry", async () => {
  const storage = fakeStorage({ local: { settings: { token: "old-token", rounds: 4 } }, syncThrows: true });
  const loaded = await loadSettings(storage);
  assert.equal(loaded.settings.token, "old-token");
  assert.equal(storage.local.data.token, "old-token");
  assert.ok(!("token" in storage.local.data.settings));
});

test("unusable stored selector packs are dropped with a message, the other settings kept", async () => {
  const storage = fakeStorage({ sync: { settings: { rounds: 6, selectorPacks: { "x.com": { inputs: ["a"] } } } } });
  const loaded = await loadSettings(storage);
  assert.equal(loaded.settings.rounds, 6);
  assert.deepEqual(loaded.settings.selectorPacks, {});
  assert.match(loaded.problem, /stored selector packs dropped: selector pack "x.com": unknown key "inputs"/);
});
