// Chorus storage: where settings and the token live.
//   settings (without the token) -> chrome.storage.sync, or chrome.storage.local when sync throws (not signed in
//                                   is fine; a quota error or a browser without sync is not)
//   token                        -> chrome.storage.local only, never synced
//   assignments (agent -> tab)   -> chrome.storage.local (tab ids mean nothing in another browser)
// A `settings` entry in local storage is this browser's newest copy (an older Chorus kept everything there, token
// included, and a save that sync refused lands there too): load() takes it, moves its token out and tries sync again.
import { normalizeSettings, withoutToken } from "./settings.js";

/** Settings into sync (local when sync throws), the token into local. Returns the area the settings went to. */
export async function saveSettings(storage, settings) {
  const clean = withoutToken(settings);
  await storage.local.set({ token: settings.token || "" });
  try {
    await storage.sync.set({ settings: clean });
  } catch {
    await storage.local.set({ settings: clean });
    return "local";
  }
  await storage.local.remove("settings");
  return "sync";
}

export async function saveAssignments(storage, assignments) {
  await storage.local.set({ assignments });
}

/**
 * {settings, assignments, area, problem}: the stored settings with the token from local storage; `problem` is
 * a message when the stored selector packs were unusable (they are dropped, the rest kept).
 */
export async function loadSettings(storage) {
  const local = await storage.local.get(["settings", "token", "assignments"]);
  let synced;
  let syncWorks = true;
  try {
    synced = (await storage.sync.get("settings")).settings;
  } catch {
    syncWorks = false;
  }
  const localCopy = local.settings && typeof local.settings === "object" ? local.settings : undefined;
  const token = String(local.token || localCopy?.token || "");
  const stored = { ...(localCopy || synced || {}), token };
  let settings;
  let problem = null;
  try {
    settings = normalizeSettings(stored);
  } catch (error) {
    problem = `stored selector packs dropped: ${error.message}`;
    settings = normalizeSettings({ ...stored, selectorPacks: {} });
  }
  let area = localCopy ? "local" : "sync";
  if (localCopy && (syncWorks || "token" in localCopy)) {
    area = await saveSettings(storage, settings); // moves the token out, and the settings to sync when it works
  }
  return { settings, assignments: local.assignments || {}, area, problem };
}
