// noeta web: a running task's page follows its log over server-sent events. The server
// renders each new timeline entry (escaped); this only places it. The model's reply and a
// running command's output grow at the timeline's end as they stream, set as text (never
// as HTML), until the log's row replaces them. A page marked
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
  const reply = new GrowingReply(timeline);
  const outputs = new CommandOutputs(timeline);
  const streaming = () => timeline.querySelector("li.streaming");
  source.addEventListener("rows", (event) => {
    const holder = document.createElement("template");
    holder.innerHTML = event.data;
    for (const row of holder.content.children) row.classList.add("fresh");
    // A claim said to have written nothing has now written: its mark goes.
    const silent = document.getElementById("silent-claim");
    if (silent) silent.remove();
    timeline.insertBefore(holder.content, streaming());  // what grows stays last
    reply.landedMaybe();
    outputs.landedMaybe();
  });
  // The one place that dispatches on what streamed; a kind not known here is ignored.
  source.addEventListener("reply", (event) => {
    const item = JSON.parse(event.data);
    switch (item.kind) {
      case "text": case "restarted": case "final": reply.show(item); break;
      case "output": case "output-final": case "output-lost": outputs.show(item); break;
      default: break;
    }
  });
  source.addEventListener("facts", (event) => {
    const facts = document.getElementById("task-facts");
    if (facts) facts.outerHTML = event.data;
  });
  source.addEventListener("finished", () => {
    source.close();
    reply.remove();  // every reply is in the log's rows now
    outputs.removeAll();
    // A finished task takes no cancel, message or answer: its forms go with its run.
    const actions = document.getElementById("task-actions");
    if (actions) actions.remove();
    body.dataset.liveState = "finished";
  });
  source.addEventListener("open", () => {
    reply.remove();  // a stream (re)opened sends the reply streaming now from its start
    outputs.removeAll();
    body.dataset.liveState = "open";
  });
});

// The reply streaming now: an item at the timeline's end (#reply-stream) whose text grows;
// a restart marks the text so far void; the final replaces it with the log's reply until
// that reply's row arrives. One place dispatches on what came; other kinds are ignored.
class GrowingReply {
  constructor(timeline) {
    this.timeline = timeline;
    this.item = null;
    this.text = null;
  }

  show(reply) {
    switch (reply.kind) {
      case "text":
        this.open().append(document.createTextNode(reply.text));
        break;
      case "restarted": {
        const void_ = this.open();
        void_.append(document.createTextNode(reply.text));
        void_.classList.add("void");
        const marker = document.createElement("div");
        marker.className = "restarted";
        marker.textContent = reply.words;
        this.item.append(marker);
        this.text = null;  // the new attempt's text starts below the marker
        break;
      }
      case "final":
        if (!reply.text) { this.remove(); break; }  // a failed call: its row says why
        this.open();
        for (const old of this.item.querySelectorAll(".reply-text, .restarted")) old.remove();
        this.text = null;
        this.open().textContent = reply.text;
        this.item.dataset.final = String(reply.seq);
        this.landedMaybe();
        break;
      default:
        break;
    }
  }

  open() {
    if (!this.item) {
      this.item = document.createElement("li");
      this.item.id = "reply-stream";
      this.item.className = "model streaming";
      const kind = document.createElement("span");
      kind.className = "kind";
      kind.textContent = "model reply, streaming";
      this.item.append(kind);
      this.timeline.append(this.item);
    }
    if (!this.text) {
      this.text = document.createElement("div");
      this.text.className = "reply-text";
      this.item.append(this.text);
    }
    return this.text;
  }

  // The final's reply is in the timeline as a row of the log: the growing one goes.
  landedMaybe() {
    const seq = this.item && this.item.dataset.final;
    if (seq && this.timeline.querySelector(`li[data-seq="${seq}"]`)) this.remove();
  }

  remove() {
    if (this.item) this.item.remove();
    this.item = null;
    this.text = null;
  }
}

// A running command's output, one item per call (li.command.streaming, data-call), its
// stdout and stderr as they are written (stderr marked), until the log's row of its
// result (output-final) or of its cut (output-lost, the worker died) arrives.
class CommandOutputs {
  constructor(timeline) {
    this.timeline = timeline;
    this.items = new Map();
  }

  show(output) {
    const item = this.open(output.call);
    switch (output.kind) {
      case "output":
        this.add(item, output.pipe, output.text);
        break;
      case "output-final": case "output-lost":
        for (const [pipe, text] of Object.entries(output.held || {})) this.add(item, pipe, text);
        if (output.kind === "output-lost") {
          const marker = document.createElement("div");
          marker.className = "restarted";
          marker.textContent = output.words;
          item.append(marker);
        }
        item.dataset.final = String(output.seq);
        this.landedMaybe();
        break;
      default:
        break;
    }
  }

  add(item, pipe, text) {
    if (!text) return;
    const out = item.querySelector("pre");
    const piece = document.createElement("span");
    piece.className = pipe;  // stdout, stderr, truncated
    piece.textContent = pipe === "truncated" ? `\n[${text || "output truncated"}]\n` : text;
    out.append(piece);
  }

  open(call) {
    let item = this.items.get(call);
    if (!item) {
      item = document.createElement("li");
      item.className = "command streaming";
      item.dataset.call = call;
      const kind = document.createElement("span");
      kind.className = "kind";
      kind.textContent = "command output, live";
      item.append(kind, document.createElement("pre"));
      this.timeline.append(item);
      this.items.set(call, item);
    }
    return item;
  }

  // A call whose result (or cut) row is in the timeline: its live output goes.
  landedMaybe() {
    for (const [call, item] of this.items) {
      const seq = item.dataset.final;
      if (seq && this.timeline.querySelector(`li[data-seq="${seq}"]`)) {
        item.remove();
        this.items.delete(call);
      }
    }
  }

  removeAll() {
    for (const item of this.items.values()) item.remove();
    this.items.clear();
  }
}

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
