// Chorus: EVERY DOM selector for the chat pages lives here. When a chat UI changes, edit only this file.
// Each key is an ordered fallback chain: chorusQuery() returns the first selector that matches.
// Loaded as a classic content script (defines globals) and by node's test runner (module.exports).
"use strict";

const CHORUS_SELECTORS = {
  // The text input (a contenteditable ProseMirror div on claude.ai)
  input: [
    'div[contenteditable="true"].ProseMirror', // primary
    'div[contenteditable="true"][data-testid]', // fallback
    'div[contenteditable="true"]', // last resort
    "textarea",
  ],
  // The submit button
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
};

/** The first element matching a key's chain, with the selector that matched ({element, selector, index}) or null. */
function chorusQueryDetailed(root, key, selectors = CHORUS_SELECTORS) {
  const chain = selectors[key];
  if (!chain) throw new Error(`unknown selector key: ${key}`);
  for (let index = 0; index < chain.length; index++) {
    const element = root.querySelector(chain[index]);
    if (element) return { element, selector: chain[index], index };
  }
  return null;
}

/** The first element matching a key's chain, or null. */
function chorusQuery(root, key, selectors = CHORUS_SELECTORS) {
  const found = chorusQueryDetailed(root, key, selectors);
  return found ? found.element : null;
}

if (typeof module !== "undefined" && module.exports) {
  module.exports = { CHORUS_SELECTORS, chorusQuery, chorusQueryDetailed };
}
