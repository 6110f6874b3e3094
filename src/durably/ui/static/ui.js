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

  // A decision on this page is posted without leaving it: the answer's message is shown
  // here (as text) and the live stream shows what the run does next. Without JavaScript
  // the same form posts normally and the answer is a page of its own.
  var flash = document.getElementById("flash");
  live.addEventListener("submit", function (e) {
    var form = e.target;
    if (!form || !form.closest || !form.closest(".decide") || !window.fetch) { return; }
    e.preventDefault();
    var body = new URLSearchParams(new FormData(form));
    fetch(form.action, { method: "POST", body: body, credentials: "same-origin" })
      .then(function (r) { return r.text().then(function (t) { return [r.ok, t]; }); })
      .then(function (res) {
        var doc = new DOMParser().parseFromString(res[1], "text/html");
        var msg = doc.getElementById("result");
        flash.textContent = msg ? msg.textContent : res[1].slice(0, 500);
        flash.className = "message " + (res[0] ? "good" : "bad");
        refresh();
      });
  });

  if (!window.EventSource) { say("(this browser cannot follow live: reload to update)"); return; }
  var source = new EventSource("/run/events?" + q);
  source.addEventListener("open", function () { say("following live"); });
  source.addEventListener("journal", function (msg) {
    var ev;
    try { ev = JSON.parse(msg.data); } catch (e) { return; }
    if (ev.kind === "model.restart") {
      // A new attempt of a streamed model call: what the old series showed is void.
      deltas.textContent = "";
      return;
    }
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
