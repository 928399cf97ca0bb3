// Chorus content script: types a prompt into the chat page, submits it, and reports when the reply is complete;
// "Check this tab" asks it which selector of each chain matches. Injected on demand into the tabs assigned to
// agents (after selectors.js). The side panel sends the tab's selector pack with each request (it knows the
// user's packs); without one the built-in pack for this host is used. Never sees the server token.
"use strict";

(() => {
  if (window.__chorusContentLoaded) return;
  window.__chorusContentLoaded = true;

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const report = (state) => {
    try {
      chrome.runtime.sendMessage({ type: "chorus-tab-state", state });
    } catch (_) {
      /* the side panel may be gone */
    }
  };

  function inputEnabled(input) {
    if (!input || !input.isConnected) return false;
    if (input.tagName === "TEXTAREA") return !input.disabled && !input.readOnly;
    return input.getAttribute("contenteditable") === "true" && input.getAttribute("aria-disabled") !== "true";
  }

  function typeInto(input, text) {
    input.focus();
    if (input.tagName === "TEXTAREA") {
      const setter = Object.getOwnPropertyDescriptor(HTMLTextAreaElement.prototype, "value").set;
      setter.call(input, text);
      input.dispatchEvent(new Event("input", { bubbles: true }));
      return;
    }
    const selection = window.getSelection();
    const range = document.createRange();
    range.selectNodeContents(input);
    selection.removeAllRanges();
    selection.addRange(range);
    // execCommand keeps the editor's own state (ProseMirror) in step; fall back to an input event.
    if (!document.execCommand("insertText", false, text)) {
      input.textContent = text;
      input.dispatchEvent(new InputEvent("input", { bubbles: true, inputType: "insertText", data: text }));
    }
  }

  async function submit(input, pack) {
    for (let i = 0; i < 20; i++) {
      const button = chorusQuery(document, "submit", pack);
      if (button && !button.disabled) {
        button.click();
        return "button";
      }
      await sleep(100);
    }
    input.dispatchEvent(new KeyboardEvent("keydown", { key: "Enter", code: "Enter", bubbles: true }));
    return "enter";
  }

  const textOf = (element) => (element.innerText || element.textContent || "").trim();

  /** The reply's text: what the container gained since `before`, after the echo of our own prompt. */
  function replyText(before, after, prompt) {
    let added = after.startsWith(before) ? after.slice(before.length) : after;
    const tail = prompt.trim().slice(-40);
    const at = tail ? added.lastIndexOf(tail) : -1;
    if (at >= 0) added = added.slice(at + tail.length);
    return added.trim().slice(-500);
  }

  /** Wait until the reply is complete: quiet for quietMs, no streaming indicator, input enabled; or the ceiling. */
  function waitForCompletion(pack, quietMs, ceilingMs, container, before, prompt) {
    return new Promise((resolve) => {
      const started = Date.now();
      let lastChange = Date.now();
      let sawActivity = false;
      const observer = new MutationObserver(() => {
        lastChange = Date.now();
        sawActivity = true;
      });
      observer.observe(container, { childList: true, subtree: true, characterData: true });
      const finish = (status) => {
        clearInterval(timer);
        observer.disconnect();
        resolve({ status, snippet: replyText(before, textOf(container), prompt), elapsedMs: Date.now() - started });
      };
      const timer = setInterval(() => {
        const now = Date.now();
        if (now - started >= ceilingMs) return finish("timed out");
        const streaming = chorusQuery(document, "streamingIndicator", pack);
        if (streaming) sawActivity = true;
        const input = chorusQuery(document, "input", pack);
        if (sawActivity && !streaming && inputEnabled(input) && now - lastChange >= quietMs) finish("done");
      }, 100);
    });
  }

  const packFor = (message) => message.selectors || packForHost(location.hostname).pack;

  async function send({ text, quietMs, ceilingMs, selectors }) {
    const pack = packFor({ selectors });
    const found = chorusQueryDetailed(document, "input", pack);
    if (!found) {
      return { status: "error", error: "no chat input found (Check this tab, then fix the site's selector pack)" };
    }
    const container = chorusQuery(document, "responseContainer", pack) || document.body;
    const before = textOf(container);
    report("typing");
    typeInto(found.element, text);
    await sleep(50);
    const how = await submit(found.element, pack);
    report("waiting");
    const result = await waitForCompletion(pack, quietMs, ceilingMs, container, before, text);
    return { ...result, inputSelector: found.selector, submittedWith: how };
  }

  chrome.runtime.onMessage.addListener((message, _sender, sendResponse) => {
    if (message?.type === "chorus-check") {
      sendResponse({ host: location.hostname, results: chorusCheckPage(document, packFor(message)) });
      return false;
    }
    if (message?.type !== "chorus-send") return false;
    send(message).then(sendResponse, (error) => sendResponse({ status: "error", error: String(error) }));
    return true; // answer asynchronously
  });
})();
