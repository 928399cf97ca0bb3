// Chorus settings export/import: the JSON file a user downloads and loads again (another profile, another
// browser). The token never goes into the file, and an import never changes the token already set.
import { normalizeSettings, withoutToken } from "./settings.js";

export const FILE_KIND = "chorus-settings";
export const FILE_VERSION = 1;

export class SettingsFileError extends Error {}

/** The export file's content (pretty JSON): every setting except the token. */
export function exportSettingsText(settings) {
  const file = { kind: FILE_KIND, version: FILE_VERSION, settings: withoutToken(normalizeSettings(settings)) };
  return JSON.stringify(file, null, 2) + "\n";
}

/**
 * An export file read back: {settings, ignored}. The settings go through normalizeSettings (selector packs
 * validated); `currentToken` is kept, and a token found in the file is ignored. `ignored` lists the keys of the
 * file's settings that were dropped: "token" when the file carries one, and keys Chorus does not know (a newer
 * version's, say).
 */
export function importSettingsText(text, currentToken = "") {
  let file;
  try {
    file = JSON.parse(String(text));
  } catch (error) {
    throw new SettingsFileError(`the file is not JSON (${error.message}); choose a file made by Export settings`);
  }
  if (!file || file.kind !== FILE_KIND || typeof file.settings !== "object" || file.settings === null) {
    throw new SettingsFileError(`not a Chorus settings file (expected "kind": "${FILE_KIND}"); choose a file made by Export settings`);
  }
  if (file.version !== FILE_VERSION) {
    throw new SettingsFileError(`settings file version ${file.version} is not supported (this Chorus reads version ${FILE_VERSION})`);
  }
  const known = Object.keys(withoutToken(normalizeSettings(undefined))); // a token in the file is ignored too
  const ignored = Object.keys(file.settings).filter((key) => !known.includes(key));
  let settings;
  try {
    settings = normalizeSettings({ ...file.settings, token: currentToken });
  } catch (error) {
    throw new SettingsFileError(`the file's ${error.message}`);
  }
  return { settings, ignored };
}
