// The exchange loop as a small state machine with its effects injected, so node can test it without a browser.
//
//   round 0: send wrapChorus(message) to every tab, wait for every reply
//   round 1..N: ask the server for unread counts; stop early when no agent has unread mail
//               (fallback when the server cannot be reached: every reply said "No new AMQ messages");
//               otherwise send the [AMQ-CHECK] prompt to every tab and wait for every reply.

import { amqCheckPrompt, saysNoNewMessages, wrapChorus } from "./prompts.js";

export const TAB_STATES = ["idle", "typing", "waiting", "done", "timed out", "error"];

export class ExchangeLoop {
  /**
   * @param {object} o
   * @param {{name: string, tabId: number}[]} o.agents   agents with their assigned tabs
   * @param {number} o.rounds                           AMQ-CHECK rounds after round 0 (default 3)
   * @param {(tabId:number, text:string, onState:(s:string)=>void) => Promise<{status:string, snippet?:string}>} o.send
   * @param {() => Promise<Record<string, number> | null>} o.unread  unread counts per agent, null if unknown
   * @param {(entry: object) => void} [o.log]
   * @param {(agent: string, state: string) => void} [o.onTabState]
   * @param {{chorus?: string, check?: string}} [o.templates]
   */
  constructor({ agents, rounds = 3, send, unread, log = () => {}, onTabState = () => {}, templates = {} }) {
    if (!agents || agents.length < 1) throw new Error("assign at least one tab to an agent");
    const tabs = agents.map((a) => a.tabId);
    if (new Set(tabs).size !== tabs.length) throw new Error("each agent needs its own tab");
    this.agents = agents;
    this.rounds = Math.max(0, Math.floor(rounds));
    this.send = send;
    this.unread = unread;
    this.log = log;
    this.onTabState = onTabState;
    this.templates = templates;
    this.state = "idle";
    this.stopped = false;
    this.roundsRun = 0;
  }

  stop() {
    this.stopped = true;
  }

  async fireRound(round, text) {
    this.log({ round, event: "fire", text });
    const results = await Promise.all(
      this.agents.map(async (agent) => {
        this.onTabState(agent.name, "typing");
        try {
          const result = await this.send(agent.tabId, text, (s) => this.onTabState(agent.name, s));
          this.onTabState(agent.name, result.status);
          return { agent: agent.name, ...result };
        } catch (error) {
          this.onTabState(agent.name, "error");
          return { agent: agent.name, status: "error", error: String(error?.message ?? error) };
        }
      }),
    );
    this.roundsRun = round + 1;
    this.log({ round, event: "replies", results: results.map(({ agent, status }) => ({ agent, status })) });
    return results;
  }

  /** Whether another AMQ-CHECK round is worth it: { go, reason }. */
  async shouldContinue(lastResults) {
    let counts = null;
    try {
      counts = await this.unread();
    } catch {
      counts = null;
    }
    if (counts) {
      const waiting = this.agents.filter((a) => (counts[a.name] ?? 0) > 0).map((a) => a.name);
      return waiting.length
        ? { go: true, reason: `unread mail for ${waiting.join(", ")}`, source: "server" }
        : { go: false, reason: "no agent has unread mail", source: "server" };
    }
    const allEmpty = lastResults.length > 0 && lastResults.every((r) => saysNoNewMessages(r.snippet));
    return allEmpty
      ? { go: false, reason: 'every reply said "No new AMQ messages"', source: "page text" }
      : { go: true, reason: "server not reachable; replies do not say the inboxes are empty", source: "page text" };
  }

  async run(message) {
    this.state = "running";
    const first = wrapChorus(message, this.templates.chorus || undefined);
    let results = await this.fireRound(0, first);
    let reason = `all ${this.rounds} rounds done`;
    for (let round = 1; round <= this.rounds && !this.stopped; round++) {
      const decision = await this.shouldContinue(results);
      this.log({ round, event: "check", ...decision });
      if (!decision.go) {
        reason = `stopped early before round ${round}: ${decision.reason}`;
        break;
      }
      results = await this.fireRound(round, amqCheckPrompt(this.templates.check || undefined));
    }
    if (this.stopped) reason = "stopped by the user";
    this.state = "finished";
    this.log({ event: "finished", reason, rounds: this.roundsRun });
    return { rounds: this.roundsRun, reason };
  }
}
