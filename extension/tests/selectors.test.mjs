import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import vm from "node:vm";

import { SELECTOR_KEYS } from "../lib/packs.js";

// selectors.js is a classic content script (no ES module syntax): run it as one, the way the browser does,
// twice, as the side panel injects it again on every send.
const source = readFileSync(new URL("../selectors.js", import.meta.url), "utf8");
const sandbox = { module: { exports: {} } };
vm.createContext(sandbox);
vm.runInContext(source, sandbox);
vm.runInContext(source, sandbox);
const { CHORUS_SELECTOR_KEYS, CHORUS_SELECTOR_PACKS, packForHost, chorusQuery, chorusQueryDetailed, chorusCheckPage } =
  sandbox.module.exports;
const CLAUDE = CHORUS_SELECTOR_PACKS["claude.ai"];

/** A stand-in document: querySelector answers only for the selectors listed as present. */
const page = (present) => ({ querySelector: (sel) => (present.includes(sel) ? { sel } : null) });

test("built-in packs: claude.ai first, chatgpt.com, generic last; every key an ordered non-empty chain", () => {
  const names = Object.keys(CHORUS_SELECTOR_PACKS);
  assert.equal(names[0], "claude.ai");
  assert.ok(names.includes("chatgpt.com"));
  assert.equal(CHORUS_SELECTOR_PACKS["chat.openai.com"], CHORUS_SELECTOR_PACKS["chatgpt.com"]);
  assert.deepEqual([...CHORUS_SELECTOR_KEYS], [...SELECTOR_KEYS]); // selectors.js and lib/packs.js agree
  for (const [name, pack] of Object.entries(CHORUS_SELECTOR_PACKS)) {
    assert.deepEqual(Object.keys(pack), [...SELECTOR_KEYS], name);
    for (const key of SELECTOR_KEYS) {
      assert.ok(pack[key].length >= 1 && pack[key].every((s) => typeof s === "string" && s), `${name}.${key}`);
    }
  }
  for (const key of SELECTOR_KEYS) assert.ok(CLAUDE[key].length >= 2, `claude.ai ${key} has a fallback`);
  assert.equal(CHORUS_SELECTOR_PACKS["chatgpt.com"].input[0], '#prompt-textarea[contenteditable="true"]');
  assert.equal(CHORUS_SELECTOR_PACKS["chatgpt.com"].submit[0], 'button[data-testid="send-button"]');
});

test("packForHost: exact host, parent domain, else generic; never a bare top-level domain or an IP's parent", () => {
  assert.equal(packForHost("claude.ai").name, "claude.ai");
  assert.equal(packForHost("www.Claude.AI.").name, "claude.ai");
  assert.equal(packForHost("chatgpt.com").pack.submit[0], 'button[data-testid="send-button"]');
  assert.equal(packForHost("chat.openai.com").name, "chat.openai.com");
  assert.equal(packForHost("notclaude.ai").name, "generic");
  assert.equal(packForHost("127.0.0.1").name, "generic");
  assert.equal(packForHost("localhost").name, "generic");
  assert.equal(packForHost("").name, "generic");
  assert.equal(packForHost(undefined).pack.input[0], CHORUS_SELECTOR_PACKS.generic.input[0]);
});

test("user packs: merged over the built-in pack of the same name, else over generic; the most specific name wins", () => {
  const custom = {
    "claude.ai": { input: ["div.new-editor"] },
    "chat.example.com": { submit: ["button#go"] },
    "example.com": { input: ["textarea#q"] },
    localhost: { input: ["#input"] },
    generic: { streamingIndicator: [".spinner"] },
  };
  const claude = packForHost("claude.ai", custom);
  assert.equal(claude.custom, true);
  assert.deepEqual([...claude.pack.input], ["div.new-editor"]);
  assert.deepEqual(claude.pack.submit, CLAUDE.submit); // the chains it leaves out stay built-in
  const chat = packForHost("chat.example.com", custom);
  assert.equal(chat.name, "chat.example.com");
  assert.deepEqual([...chat.pack.submit], ["button#go"]);
  assert.deepEqual(chat.pack.input, CHORUS_SELECTOR_PACKS.generic.input); // not example.com's: one pack per tab
  assert.equal(packForHost("www.example.com", custom).pack.input[0], "textarea#q");
  assert.equal(packForHost("localhost", custom).pack.input[0], "#input");
  const other = packForHost("other.org", custom);
  assert.equal(other.name, "generic");
  assert.equal(other.custom, true);
  assert.deepEqual([...other.pack.streamingIndicator], [".spinner"]);
  assert.equal(packForHost("claude.ai").custom, false);
});

test("the primary selector wins when present; a missing primary falls back in order", () => {
  const found = chorusQueryDetailed(page(CLAUDE.input), "input", CLAUDE);
  assert.equal(found.index, 0);
  assert.equal(found.selector, 'div[contenteditable="true"].ProseMirror');
  const doc = page(['div[contenteditable="true"]', "textarea"]);
  assert.equal(chorusQueryDetailed(doc, "input", CLAUDE).selector, 'div[contenteditable="true"]');
  assert.equal(chorusQuery(page(['button[aria-label="Send"]']), "submit", CLAUDE).sel, 'button[aria-label="Send"]');
  assert.equal(chorusQuery(page(['button[type="submit"]']), "submit").sel, 'button[type="submit"]'); // generic
});

test("nothing matching gives null, an unknown key throws", () => {
  assert.equal(chorusQuery(page([]), "submit"), null);
  assert.throws(() => chorusQuery(page([]), "nope"), /unknown selector key/);
});

test("chorusCheckPage reports, per key, the index and selector that matched or that none did", () => {
  const generic = CHORUS_SELECTOR_PACKS.generic;
  const report = chorusCheckPage(page(['div[contenteditable="true"]', 'button[aria-label="Send"]', "main"]), generic);
  assert.deepEqual(Object.keys(report), [...SELECTOR_KEYS]);
  assert.deepEqual({ ...report.input }, { index: 1, selector: 'div[contenteditable="true"]', of: generic.input.length });
  assert.equal(report.submit.index, 2);
  assert.equal(report.responseContainer.selector, "main");
  assert.deepEqual({ ...report.streamingIndicator }, { index: null, of: generic.streamingIndicator.length });
});
