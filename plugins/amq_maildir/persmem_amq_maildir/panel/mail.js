// Live AMQ feed: one EventSource (Server-Sent Events), no polling. Text is set with textContent only; the one
// exception is body_html, the server's Markdown rendering already sanitised by nh3 (the dashboard's markdown.py),
// and the page's CSP forbids inline scripts and handlers should anything ever slip through.
(function () {
  const feed = document.getElementById("feed");
  const state = document.getElementById("live-state");
  if (!feed || !state || new URLSearchParams(location.search).has("thread")) return;
  const colors = JSON.parse(feed.dataset.colors || "{}");
  const el = (tag, cls, text) => { const e = document.createElement(tag); if (cls) e.className = cls; if (text !== undefined) e.textContent = text; return e; };
  const source = new EventSource(state.dataset.events);
  source.addEventListener("open", () => { state.textContent = "Live: connected."; });
  source.addEventListener("error", () => { state.textContent = "Live: reconnecting…"; });
  source.addEventListener("message", (event) => {
    const m = JSON.parse(event.data);
    if (feed.querySelector(`[data-id="${CSS.escape(m.id)}"][data-to="${CSS.escape(m.to)}"]`)) return;
    const empty = feed.querySelector(".empty"); if (empty) empty.remove();
    const details = el("details", `item message from-${colors[m.from] || 0}`);
    details.dataset.id = m.id; details.dataset.to = m.to; details.dataset.live = "1";
    const summary = el("summary");
    summary.append(el("strong", "sender", m.from), " → ", el("span", "to", m.to), " ", el("span", "subject", m.subject),
                   " ", el("span", "meta", `${m.kind} · ${m.priority} · just now`), " ", el("span", "badge unread", "unread"));
    const link = el("a", null, "thread"); link.href = feed.dataset.threadUrl + encodeURIComponent(m.thread || m.id);
    const meta = el("p", "meta"); meta.append(link, ` · id ${m.id}`);
    let body;
    if (typeof m.body_html === "string") { body = el("div", "body markdown"); body.innerHTML = m.body_html; }
    else { body = el("pre", "body", m.body || ""); }
    details.append(summary, body, meta);
    const li = el("li"); li.append(details); feed.prepend(li);
  });
  source.addEventListener("unread", (event) => {
    const counts = JSON.parse(event.data).unread || {};
    for (const badge of document.querySelectorAll("#unread [data-agent]")) {
      const n = counts[badge.dataset.agent] || 0;
      badge.querySelector("b").textContent = n;
      badge.classList.toggle("unread", n > 0);
    }
  });
})();
