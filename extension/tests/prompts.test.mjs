import assert from "node:assert/strict";
import { test } from "node:test";

import { amqCheckPrompt, DEFAULT_CHORUS_TEMPLATE, saysNoNewMessages, wrapChorus } from "../lib/prompts.js";

test("round 0 wraps the message in the [CHORUS] instruction (seed wording)", () => {
  const text = wrapChorus("  Should we cache search results?  ");
  assert.ok(text.startsWith("[CHORUS] Should we cache search results?"));
  assert.match(text, /amq_send to the other instance; you are the sender/);
});

test("a custom template places the message, or appends it", () => {
  assert.equal(wrapChorus("hi", "<<{message}>> {message}"), "<<hi>> hi");
  assert.equal(wrapChorus("hi", "[CHORUS]"), "[CHORUS] hi");
  assert.throws(() => wrapChorus("   "), /empty/);
});

test("rounds 1..N send the [AMQ-CHECK] prompt", () => {
  assert.match(amqCheckPrompt(), /^\[AMQ-CHECK\] Check your AMQ inbox \(amq_check\)/);
  assert.equal(amqCheckPrompt("custom"), "custom");
  assert.ok(DEFAULT_CHORUS_TEMPLATE.includes("{message}"));
});

test('"No new AMQ messages" variants are recognised in the last 500 characters', () => {
  for (const reply of ["No new AMQ messages.", "I checked: no new messages.", "no AMQ messages", "My inbox is empty", "nothing new"]) {
    assert.ok(saysNoNewMessages(reply), reply);
  }
  assert.ok(!saysNoNewMessages("I read 2 new AMQ messages and replied."));
  assert.ok(!saysNoNewMessages("No new AMQ messages." + " x".repeat(400)));
});
