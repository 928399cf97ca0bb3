import assert from "node:assert/strict";
import { test } from "node:test";

import { ExchangeLoop } from "../lib/loop.js";

const agents = [
  { name: "kite", tabId: 1 },
  { name: "wren", tabId: 2 },
];

function harness({ unreadSeq = [], replies = () => "ok", rounds = 3, failTab = null } = {}) {
  const sent = [];
  const logs = [];
  const states = [];
  let checks = 0;
  const loop = new ExchangeLoop({
    agents,
    rounds,
    send: async (tabId, text) => {
      sent.push({ tabId, text });
      if (tabId === failTab) throw new Error("tab closed");
      return { status: "done", snippet: replies(tabId, sent.length) };
    },
    unread: async () => unreadSeq[checks++] ?? null,
    log: (e) => logs.push(e),
    onTabState: (agent, state) => states.push([agent, state]),
  });
  return { loop, sent, logs, states };
}

test("round 0 sends [CHORUS] to every tab, then N [AMQ-CHECK] rounds while mail is waiting", async () => {
  const h = harness({ unreadSeq: [{ kite: 1, wren: 1 }, { kite: 0, wren: 2 }, { kite: 1 }], rounds: 3 });
  const result = await h.loop.run("plan the cache");
  assert.equal(result.rounds, 4);
  assert.match(result.reason, /all 3 rounds done/);
  assert.deepEqual(h.sent.slice(0, 2).map((s) => s.tabId), [1, 2]);
  assert.ok(h.sent[0].text.startsWith("[CHORUS] plan the cache"));
  assert.ok(h.sent.slice(2).every((s) => s.text.startsWith("[AMQ-CHECK]")));
  assert.equal(h.sent.length, 8);
});

test("stops early when the server says no agent has unread mail", async () => {
  const h = harness({ unreadSeq: [{ kite: 1, wren: 0 }, { kite: 0, wren: 0 }], rounds: 5 });
  const result = await h.loop.run("hello");
  assert.equal(result.rounds, 2);
  assert.match(result.reason, /stopped early before round 2: no agent has unread mail/);
  assert.deepEqual(h.logs.filter((e) => e.event === "check").map((e) => e.source), ["server", "server"]);
});

test("without the server, stops when every reply says No new AMQ messages", async () => {
  const h = harness({ rounds: 5, replies: (tab, n) => (n > 4 ? "No new AMQ messages." : "replied to wren") });
  const result = await h.loop.run("hello");
  assert.equal(result.rounds, 3);
  assert.match(result.reason, /No new AMQ messages/);
  assert.equal(h.logs.find((e) => e.event === "check").source, "page text");
});

test("rounds = 0 sends only round 0; a failing tab is reported, not fatal", async () => {
  const h = harness({ rounds: 0, failTab: 2 });
  const result = await h.loop.run("solo");
  assert.equal(result.rounds, 1);
  const replies = h.logs.find((e) => e.event === "replies").results;
  assert.deepEqual(replies, [{ agent: "kite", status: "done" }, { agent: "wren", status: "error" }]);
  assert.deepEqual(h.states.filter(([a]) => a === "wren").map(([, s]) => s), ["typing", "error"]);
});

test("stop() ends the loop after the current round; bad assignments are refused", async () => {
  const h = harness({ unreadSeq: [{ kite: 1 }, { kite: 1 }, { kite: 1 }], rounds: 3 });
  const origSend = h.loop.send;
  h.loop.send = async (...args) => {
    h.loop.stop();
    return origSend(...args);
  };
  const result = await h.loop.run("x");
  assert.equal(result.rounds, 1);
  assert.match(result.reason, /stopped by the user/);
  assert.throws(() => new ExchangeLoop({ agents: [], send: async () => {}, unread: async () => null }), /at least one/);
  assert.throws(() => new ExchangeLoop({ agents: [{ name: "a", tabId: 1 }, { name: "b", tabId: 1 }], send: async () => {}, unread: async () => null }), /own tab/);
});
