// Chorus: EVERY DOM selector for the chat pages lives here, as one pack per chat site. When a chat UI changes,
// edit its pack here (or add a pack in Settings → Selector packs, which is merged over these).
// Each key of a pack is an ordered fallback chain: chorusQueryDetailed() returns the first selector that matches.
// Loaded three ways: injected into chat tabs before content.js, as a classic <script> in the side panel, and by
// node's test runner (module.exports). Declared with var/function only: the file is injected again on every send,
// and a second `const` of the same name in the same page would throw.
"use strict";

/** The four things Chorus looks for on a chat page, in the order "Check this tab" reports them. */
var CHORUS_SELECTOR_KEYS = ["input", "submit", "responseContainer", "streamingIndicator"];

var CHORUS_SELECTOR_PACKS = {
  // claude.ai: a contenteditable ProseMirror input, "Send message" / "Stop response" buttons.
  "claude.ai": {
    input: [
      'div[contenteditable="true"].ProseMirror', // primary
      'div[contenteditable="true"][data-testid]', // fallback
      'div[contenteditable="true"]', // last resort
      "textarea",
    ],
    submit: [
      'button[aria-label="Send Message"]',
      'button[aria-label="Send message"]',
      'button[aria-label="Send"]',
      'button[data-testid="send-button"]',
    ],
    // Where responses appear (watched with a MutationObserver)
    responseContainer: [
      '[data-testid="chat-message-list"]',
      'div[class*="thread"]',
      '[role="log"]',
      "main",
    ],
    // Present while the assistant is still generating
    streamingIndicator: [
      '[data-testid="stop-button"]',
      'button[aria-label="Stop Response"]',
      'button[aria-label="Stop response"]',
    ],
  },
  // chatgpt.com: the composer is a contenteditable div with id prompt-textarea (a <textarea> with that id in older
  // versions); send and stop are buttons with data-testid send-button / stop-button. Replies are
  // article[data-testid^="conversation-turn"] elements inside <main>, so <main> is the container to watch.
  // Written from its public markup, not tested against the live site: "Check this tab" shows what still matches.
  "chatgpt.com": {
    input: ['#prompt-textarea[contenteditable="true"]', "textarea#prompt-textarea", 'div[contenteditable="true"]'],
    submit: ['button[data-testid="send-button"]', "button#composer-submit-button", 'button[aria-label="Send prompt"]'],
    responseContainer: ["main", '[role="main"]'],
    streamingIndicator: ['button[data-testid="stop-button"]', 'button[aria-label="Stop streaming"]'],
  },
  // Any other site: the common shapes of a chat page (the test's mock chat pages match this pack).
  generic: {
    input: [
      'div[contenteditable="true"].ProseMirror',
      'div[contenteditable="true"]',
      '[role="textbox"][contenteditable="true"]',
      "textarea",
    ],
    submit: [
      'button[aria-label="Send Message"]',
      'button[aria-label="Send message"]',
      'button[aria-label="Send"]',
      'button[data-testid="send-button"]',
      'button[type="submit"]',
    ],
    responseContainer: ['[data-testid="chat-message-list"]', '[role="log"]', "main"],
    streamingIndicator: ['[data-testid="stop-button"]', 'button[aria-label^="Stop"]'],
  },
};
// chat.openai.com redirects to chatgpt.com; a tab still showing the old host gets the same pack.
CHORUS_SELECTOR_PACKS["chat.openai.com"] = CHORUS_SELECTOR_PACKS["chatgpt.com"];

/**
 * The pack for a tab's host: the most specific name that is the host or a parent domain of it
 * (www.claude.ai → claude.ai), from the user's packs or the built-in ones, else "generic".
 * A user's pack replaces only the chains it names; the others come from the built-in pack of the same name,
 * or from the generic pack when there is none. Returns {name, pack, custom} (custom: a user's pack took part).
 */
function packForHost(host, customPacks) {
  var custom = customPacks || {};
  var own = function (object, key) {
    return Object.prototype.hasOwnProperty.call(object, key);
  };
  var clean = String(host || "").toLowerCase().replace(/\.$/, "");
  var labels = clean.split(".");
  // parents down to a two-label domain (never a bare "ai"); an IP address matches only itself
  var last = /^[0-9.]+$|:/.test(clean) ? 0 : Math.max(0, labels.length - 2);
  var name = "generic";
  for (var i = 0; i <= last && clean; i++) {
    var candidate = labels.slice(i).join(".");
    if (own(custom, candidate) || own(CHORUS_SELECTOR_PACKS, candidate)) {
      name = candidate;
      break;
    }
  }
  var base = own(CHORUS_SELECTOR_PACKS, name) ? CHORUS_SELECTOR_PACKS[name] : CHORUS_SELECTOR_PACKS.generic;
  var pack = {};
  for (var k = 0; k < CHORUS_SELECTOR_KEYS.length; k++) {
    var key = CHORUS_SELECTOR_KEYS[k];
    pack[key] = (own(custom, name) && custom[name][key]) || base[key];
  }
  return { name: name, pack: pack, custom: own(custom, name) };
}

/** The first element matching a key's chain, with the selector that matched ({element, selector, index}) or null. */
function chorusQueryDetailed(root, key, selectors) {
  var chain = (selectors || CHORUS_SELECTOR_PACKS.generic)[key];
  if (!chain) throw new Error("unknown selector key: " + key);
  for (var index = 0; index < chain.length; index++) {
    var element = root.querySelector(chain[index]);
    if (element) return { element: element, selector: chain[index], index: index };
  }
  return null;
}

/** The first element matching a key's chain, or null. */
function chorusQuery(root, key, selectors) {
  var found = chorusQueryDetailed(root, key, selectors);
  return found ? found.element : null;
}

/**
 * "Check this tab": for every key, which selector of the chain matched ({index, selector, of}) or
 * {index: null, of} when none did (of = the chain's length).
 */
function chorusCheckPage(root, selectors) {
  var report = {};
  for (var k = 0; k < CHORUS_SELECTOR_KEYS.length; k++) {
    var key = CHORUS_SELECTOR_KEYS[k];
    var found = chorusQueryDetailed(root, key, selectors);
    var of = selectors[key].length;
    report[key] = found ? { index: found.index, selector: found.selector, of: of } : { index: null, of: of };
  }
  return report;
}

if (typeof module !== "undefined" && module.exports) {
  module.exports = {
    CHORUS_SELECTOR_KEYS,
    CHORUS_SELECTOR_PACKS,
    packForHost,
    chorusQuery,
    chorusQueryDetailed,
    chorusCheckPage,
  };
}
