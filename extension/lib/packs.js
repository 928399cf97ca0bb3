// Chorus: validation of the user's selector packs (Settings → Selector packs, JSON). The built-in packs and the
// choice of a pack by host live in ../selectors.js; this module only decides whether a user's packs are usable.

/** The keys a pack may name (the same four as CHORUS_SELECTOR_KEYS in selectors.js; a unit test keeps them equal). */
export const SELECTOR_KEYS = Object.freeze(["input", "submit", "responseContainer", "streamingIndicator"]);

export class PackError extends Error {}

const HOST = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$/;

/** Throws when the page's own CSS parser refuses the selector (the side panel); node has none, so it checks nothing. */
function domParses(selector) {
  if (typeof document === "undefined") return;
  document.createDocumentFragment().querySelector(selector);
}

/**
 * The user's packs, checked and cleaned: {host: {key: [selector, ...]}}. Names are host names (or "generic");
 * keys are the four selector keys; each value a non-empty array of strings that parse as CSS selectors.
 * Throws PackError naming the place and the fix. `parses(selector)` throws on a selector that does not parse.
 */
export function validatePacks(value, { parses = domParses } = {}) {
  if (value === undefined || value === null || value === "") return {};
  if (typeof value !== "object" || Array.isArray(value)) {
    throw new PackError('selector packs must be a JSON object: {"example.com": {"input": ["textarea"]}}');
  }
  const packs = {};
  for (const [rawName, pack] of Object.entries(value)) {
    const name = rawName.trim().toLowerCase();
    if (/[/:]/.test(name)) {
      throw new PackError(`selector pack "${rawName}": name it by the host alone (like example.com), not a URL`);
    }
    if (!HOST.test(name)) throw new PackError(`selector pack "${rawName}": not a host name (like example.com)`);
    if (!pack || typeof pack !== "object" || Array.isArray(pack)) {
      throw new PackError(`selector pack "${name}" must be an object of chains, like {"input": ["textarea"]}`);
    }
    const chains = {};
    for (const [key, chain] of Object.entries(pack)) {
      const where = `selector pack "${name}", ${key}`;
      if (!SELECTOR_KEYS.includes(key)) {
        throw new PackError(`selector pack "${name}": unknown key "${key}" (known keys: ${SELECTOR_KEYS.join(", ")})`);
      }
      if (!Array.isArray(chain) || chain.length === 0 || !chain.every((s) => typeof s === "string" && s.trim())) {
        throw new PackError(`${where}: must be a non-empty array of selector strings, like ["textarea"]`);
      }
      chains[key] = chain.map((selector, index) => {
        const text = selector.trim();
        try {
          parses(text);
        } catch (error) {
          throw new PackError(`${where}[${index}]: "${text}" is not a valid CSS selector (${error.message})`);
        }
        return text;
      });
    }
    packs[name] = chains;
  }
  return packs;
}

/** The packs textarea's text: empty means no packs; otherwise JSON, validated. */
export function parsePacksText(text) {
  const trimmed = String(text ?? "").trim();
  if (!trimmed) return {};
  let value;
  try {
    value = JSON.parse(trimmed);
  } catch (error) {
    throw new PackError(`selector packs are not valid JSON: ${error.message}`);
  }
  return validatePacks(value);
}

/** The packs as the Settings textarea shows them (empty when there are none). */
export function packsText(packs) {
  return packs && Object.keys(packs).length ? JSON.stringify(packs, null, 2) : "";
}
