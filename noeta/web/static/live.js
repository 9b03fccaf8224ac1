// noeta web: a running task's page follows its log over server-sent events. The server
// renders each new timeline entry (escaped); this only places it. A page marked
// data-refresh (queues, limits) reads itself again every few seconds and swaps its
// figures. No framework.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const body = document.body;
  if (body.dataset.refresh) refreshFigures(Number(body.dataset.refresh) * 1000);
  const feed = body.dataset.live;
  if (!feed || !window.EventSource) return;
  const timeline = document.getElementById("timeline");
  const source = new EventSource(feed);
  source.addEventListener("rows", (event) => {
    const holder = document.createElement("template");
    holder.innerHTML = event.data;
    for (const row of holder.content.children) row.classList.add("fresh");
    // A claim said to have written nothing has now written: its mark goes.
    const silent = document.getElementById("silent-claim");
    if (silent) silent.remove();
    timeline.append(holder.content);
  });
  source.addEventListener("facts", (event) => {
    const facts = document.getElementById("task-facts");
    if (facts) facts.outerHTML = event.data;
  });
  source.addEventListener("finished", () => {
    source.close();
    // A finished task takes no cancel, message or answer: its forms go with its run.
    const actions = document.getElementById("task-actions");
    if (actions) actions.remove();
    body.dataset.liveState = "finished";
  });
  source.addEventListener("open", () => { body.dataset.liveState = "open"; });
});

// The page's #figures and status line, read again from the server every `interval` ms
// (a failed read is tried again at the next round).
function refreshFigures(interval) {
  const swap = async () => {
    try {
      const reply = await fetch(location.href, { credentials: "same-origin" });
      if (reply.ok) {
        const fresh = new DOMParser().parseFromString(await reply.text(), "text/html");
        for (const id of ["figures", "status-line"]) {
          const now = document.getElementById(id);
          const next = fresh.getElementById(id);
          if (now && next) now.replaceWith(next);
        }
        document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
      }
    } finally {
      setTimeout(swap, interval);
    }
  };
  setTimeout(swap, interval);
}
