// durably ui: follow the run's event stream (SSE) and refresh the run's live part.
// Journal data is only ever put in the page as text (textContent), never as HTML; the
// live part is HTML rendered (and escaped) by the server.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) { return; }
  var runId = live.getAttribute("data-run");
  var state = document.getElementById("live-state");
  var list = document.getElementById("events");
  var deltas = document.getElementById("deltas");
  var EVENTS_SHOWN_MAX = 500;
  var pending = null;
  var q = "id=" + encodeURIComponent(runId);

  function refresh() {
    if (pending) { return; }
    pending = setTimeout(function () {
      pending = null;
      fetch("/run/live?" + q, { credentials: "same-origin", cache: "no-store" })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) { if (html !== null) { live.innerHTML = html; } });
    }, 150);
  }

  function say(text) { if (state) { state.textContent = text; } }

  if (!window.EventSource) { say("(this browser cannot follow live: reload to update)"); return; }
  var source = new EventSource("/run/events?" + q);
  source.addEventListener("open", function () { say("following live"); });
  source.addEventListener("journal", function (msg) {
    var ev;
    try { ev = JSON.parse(msg.data); } catch (e) { return; }
    if (ev.kind === "model.delta") {
      var t = ev.data && (ev.data.text || ev.data.arguments || "");
      deltas.textContent += String(t);
      return;
    }
    var li = document.createElement("li");
    var name = ev.data && ev.data.name ? " " + ev.data.name : "";
    li.textContent = "#" + ev.cursor + " " + ev.kind + (ev.position !== null ? " @" + ev.position : "") + name;
    list.insertBefore(li, list.firstChild);
    while (list.children.length > EVENTS_SHOWN_MAX) { list.removeChild(list.lastChild); }
    if (ev.kind !== "step.started" && ev.kind !== "user") { refresh(); }
  });
  source.addEventListener("end", function () {
    source.close();
    say("the run is finished");
    refresh();
  });
  source.addEventListener("error", function () {
    if (source.readyState === EventSource.CLOSED) { say("disconnected: reload to follow again"); }
    else { say("reconnecting…"); }
  });
})();
