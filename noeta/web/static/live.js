// noeta web: a running task's page follows its log over server-sent events. The server
// renders each new timeline entry (escaped); this only places it. No framework.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const body = document.body;
  const feed = body.dataset.live;
  if (!feed || !window.EventSource) return;
  const timeline = document.getElementById("timeline");
  const source = new EventSource(feed);
  source.addEventListener("rows", (event) => {
    const holder = document.createElement("template");
    holder.innerHTML = event.data;
    for (const row of holder.content.children) row.classList.add("fresh");
    timeline.append(holder.content);
  });
  source.addEventListener("facts", (event) => {
    const facts = document.getElementById("task-facts");
    if (facts) facts.outerHTML = event.data;
  });
  source.addEventListener("finished", () => {
    source.close();
    body.dataset.liveState = "finished";
  });
  source.addEventListener("open", () => { body.dataset.liveState = "open"; });
});
