import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import vm from "node:vm";

// selectors.js is a classic content script (no ES module syntax): run it as one, the way the browser does.
const sandbox = { module: { exports: {} } };
vm.runInNewContext(readFileSync(new URL("../selectors.js", import.meta.url), "utf8"), sandbox);
const { CHORUS_SELECTORS, chorusQuery, chorusQueryDetailed } = sandbox.module.exports;

/** A stand-in document: querySelector answers only for the selectors listed as present. */
const page = (present) => ({ querySelector: (sel) => (present.includes(sel) ? { sel } : null) });

test("every key has an ordered, non-empty fallback chain", () => {
  for (const key of ["input", "submit", "responseContainer", "streamingIndicator"]) {
    assert.ok(Array.isArray(CHORUS_SELECTORS[key]) && CHORUS_SELECTORS[key].length >= 2, key);
  }
});

test("the primary selector wins when present", () => {
  const found = chorusQueryDetailed(page(CHORUS_SELECTORS.input), "input");
  assert.equal(found.index, 0);
  assert.equal(found.selector, 'div[contenteditable="true"].ProseMirror');
});

test("a missing primary falls back to the next selector, in order", () => {
  const doc = page(['div[contenteditable="true"]', "textarea"]);
  assert.equal(chorusQueryDetailed(doc, "input").selector, 'div[contenteditable="true"]');
  assert.equal(chorusQuery(page(['button[aria-label="Send"]']), "submit").sel, 'button[aria-label="Send"]');
});

test("nothing matching gives null, an unknown key throws", () => {
  assert.equal(chorusQuery(page([]), "submit"), null);
  assert.throws(() => chorusQuery(page([]), "nope"), /unknown selector key/);
});
