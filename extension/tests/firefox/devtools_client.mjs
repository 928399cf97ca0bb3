// A small client for Firefox's devtools remote protocol (the one about:debugging and web-ext use), enough to find
// the Chorus extension's documents and evaluate code in one of them.
//
// Why not WebDriver BiDi for this part: Firefox's BiDi leaves out every document with an extension principal
// (isBrowsingContextCompatible skips them, bug 1755014), so a moz-extension:// page, in a tab or in the sidebar,
// can be navigated to but never scripted, awaited or screenshotted over BiDi. The devtools server can.
//
// Wire format: "<byte length>:<json>" packets. A packet with a "type" is an event; any other packet answers the
// oldest open request to the actor it comes from.
import net from "node:net";

export class DevtoolsClient {
  /** Connects to a Firefox started with --start-debugger-server <port>, retrying while it comes up. */
  static async connect(port, { timeoutMs = 15000 } = {}) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      try {
        return await new Promise((resolve, reject) => {
          const socket = net.connect(port, "127.0.0.1");
          const client = new DevtoolsClient(socket);
          socket.once("error", reject);
          client.onGreeting = () => resolve(client);
        });
      } catch (error) {
        if (Date.now() > deadline) {
          throw new Error(`Firefox's devtools server did not answer on port ${port} (${error.message}); ` +
            "it needs --start-debugger-server and the devtools.debugger.remote-enabled pref");
        }
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  }

  constructor(socket) {
    this.socket = socket;
    this.buffer = Buffer.alloc(0);
    this.pending = new Map(); // actor -> [settle]
    this.listeners = new Set();
    socket.on("data", (data) => {
      this.buffer = Buffer.concat([this.buffer, data]);
      this.#drain();
    });
    socket.on("close", () => {
      for (const queue of this.pending.values()) for (const settle of queue) settle({ error: "closed", message: "connection closed" });
      this.pending.clear();
    });
  }

  #drain() {
    for (;;) {
      const colon = this.buffer.indexOf(58); // ":"
      if (colon < 0) return;
      const length = Number(this.buffer.subarray(0, colon).toString());
      if (this.buffer.length < colon + 1 + length) return;
      const packet = JSON.parse(this.buffer.subarray(colon + 1, colon + 1 + length).toString());
      this.buffer = this.buffer.subarray(colon + 1 + length);
      this.#dispatch(packet);
    }
  }

  #dispatch(packet) {
    if (packet.from === "root" && packet.applicationType) return this.onGreeting?.(packet);
    if (packet.type) {
      for (const listener of this.listeners) listener(packet);
      return;
    }
    this.pending.get(packet.from)?.shift()?.(packet);
  }

  request(to, type, params = {}) {
    return new Promise((resolve, reject) => {
      if (!this.pending.has(to)) this.pending.set(to, []);
      this.pending.get(to).push((packet) =>
        packet.error ? reject(new Error(`devtools ${type} to ${to}: ${packet.error}: ${packet.message}`)) : resolve(packet));
      const body = Buffer.from(JSON.stringify({ to, type, ...params }));
      this.socket.write(Buffer.concat([Buffer.from(`${body.length}:`), body]));
    });
  }

  /** Watches every document of the add-on `addonId`; returns a live Map of target actor -> target form. */
  async watchAddonDocuments(addonId) {
    const { addons } = await this.request("root", "listAddons");
    const addon = addons.find((a) => a.id === addonId);
    if (!addon) throw new Error(`add-on ${addonId} is not installed (installed: ${addons.map((a) => a.id).join(", ")})`);
    const watcher = await this.request(addon.actor, "getWatcher", { isServerTargetSwitchingEnabled: true });
    const targets = new Map();
    this.listeners.add((packet) => {
      if (packet.from !== watcher.actor) return;
      if (packet.type === "target-available-form") targets.set(packet.target.actor, packet.target);
      if (packet.type === "target-destroyed-form") targets.delete(packet.target.actor);
    });
    await this.request(watcher.actor, "watchTargets", { targetType: "frame" });
    return targets;
  }

  /** Evaluates `source` (an expression; a promise is awaited) in a target's document and returns its value. */
  async evaluate(target, source, timeoutMs = 120000) {
    const results = new Map(); // resultID -> evaluationResult (the event may come before the request's answer)
    let wake = () => {};
    const listener = (packet) => {
      if (packet.type !== "evaluationResult" || packet.from !== target.consoleActor) return;
      results.set(packet.resultID, packet);
      wake();
    };
    this.listeners.add(listener);
    try {
      const { resultID } = await this.request(target.consoleActor, "evaluateJSAsync", { text: source, mapped: { await: true } });
      const deadline = Date.now() + timeoutMs;
      while (!results.has(resultID)) {
        if (Date.now() > deadline) throw new Error(`evaluation in ${target.url} took over ${timeoutMs} ms`);
        await new Promise((resolve) => {
          wake = resolve;
          setTimeout(resolve, 500);
        });
      }
      const result = results.get(resultID);
      if (result.hasException || result.exceptionMessage) {
        throw new Error(`in ${target.url}: ${result.exceptionMessage || JSON.stringify(result.exception)}`);
      }
      return this.#value(result.result);
    } finally {
      this.listeners.delete(listener);
    }
  }

  async #value(grip) {
    if (grip && typeof grip === "object" && grip.type === "longString") {
      return (await this.request(grip.actor, "substring", { start: 0, end: grip.length })).substring;
    }
    if (grip && typeof grip === "object" && grip.type === "undefined") return undefined;
    if (grip && typeof grip === "object" && grip.type === "null") return null;
    return grip;
  }

  /** A PNG (as a Buffer) of a document, drawn by Firefox's own screenshot actor (works for extension pages). */
  async screenshot(target) {
    const root = await this.request("root", "getRoot");
    const { value } = await this.request(root.screenshotActor, "capture", {
      args: { browsingContextID: target.browsingContextID, fullpage: true, snapshotScale: 1, disableFlash: true },
    });
    if (!value?.data) throw new Error(`Firefox drew no screenshot of ${target.url}: ${JSON.stringify(value?.messages)}`);
    return Buffer.from(value.data.split(",")[1], "base64");
  }

  close() {
    this.socket.destroy();
  }
}
