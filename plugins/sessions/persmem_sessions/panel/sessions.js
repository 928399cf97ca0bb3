// The Sessions panel's indexing progress bar, kept live while turns wait to be indexed for search (after an import
// of many transcripts): one EventSource (Server-Sent Events), closed once everything is indexed. Text is set with
// textContent only.
(function () {
  const box = document.getElementById("indexing");
  const bar = document.getElementById("indexing-bar");
  const text = document.getElementById("indexing-text");
  if (!box || !bar || !text || box.dataset.busy !== "yes") return;
  const source = new EventSource(box.dataset.events);
  source.addEventListener("indexing", (event) => {
    const state = JSON.parse(event.data);
    bar.max = Math.max(state.turns, 1);
    bar.value = state.turns ? state.indexed : 1;
    text.textContent = state.text;
    box.dataset.busy = state.busy ? "yes" : "no";
    if (!state.busy) source.close();
  });
})();
