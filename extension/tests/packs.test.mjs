import assert from "node:assert/strict";
import { test } from "node:test";

import { PackError, packsText, parsePacksText, validatePacks } from "../lib/packs.js";

test("valid packs are cleaned: host names lower-cased, selectors trimmed; empty means none", () => {
  const packs = validatePacks({ "Chat.Example.com": { input: [" textarea#q "], submit: ["button#go"] }, generic: {} });
  assert.deepEqual(packs, { "chat.example.com": { input: ["textarea#q"], submit: ["button#go"] }, generic: {} });
  assert.deepEqual(validatePacks(undefined), {});
  assert.deepEqual(parsePacksText("   "), {});
  assert.equal(packsText({}), "");
  assert.deepEqual(parsePacksText(packsText(packs)), packs); // what the Settings textarea shows reads back the same
});

test("an unknown key is refused, naming the known ones", () => {
  assert.throws(() => validatePacks({ "example.com": { inputs: ["textarea"] } }),
    (e) => e instanceof PackError && /selector pack "example.com": unknown key "inputs" \(known keys: input, submit, responseContainer, streamingIndicator\)/.test(e.message));
});

test("a chain that is not a non-empty array of strings is refused", () => {
  for (const chain of ["textarea", [], [""], ["ok", 3], { 0: "textarea" }]) {
    assert.throws(() => validatePacks({ "example.com": { input: chain } }),
      /selector pack "example.com", input: must be a non-empty array of selector strings/, JSON.stringify(chain));
  }
});

test("a selector that does not parse is refused with its place (the panel parses with the browser's CSS parser)", () => {
  const parses = (selector) => {
    if (selector === "div[") throw new SyntaxError("'div[' is not a valid selector");
  };
  assert.throws(() => validatePacks({ "example.com": { submit: ["button", "div["] } }, { parses }),
    /selector pack "example.com", submit\[1\]: "div\[" is not a valid CSS selector \('div\[' is not a valid selector\)/);
});

test("pack names are host names, and the packs an object of objects", () => {
  assert.throws(() => validatePacks({ "https://example.com/": {} }), /name it by the host alone \(like example.com\), not a URL/);
  assert.throws(() => validatePacks({ "exa mple.com": {} }), /not a host name/);
  assert.throws(() => validatePacks({ "example.com": ["textarea"] }), /must be an object of chains/);
  assert.throws(() => validatePacks([{ input: ["x"] }]), /must be a JSON object/);
  assert.throws(() => parsePacksText("{input: [x]}"), /selector packs are not valid JSON/);
});
