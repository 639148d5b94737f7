// longrun console live updates (no build step, no dependencies). Listens to the page's
// Server-Sent Events (body[data-live-source]) and, on every ledger event, fetches the page's
// live parts again ([data-live-fragment]) and lists the events ([data-live-log]). Text from
// events is inserted with textContent only; fragments are server-rendered and escaped.
(function () {
  "use strict";
  var body = document.body;
  var source = body && body.getAttribute("data-live-source");
  var state = { events: 0, lastEventId: "", arrivals: [], refreshes: 0, opened: 0 };
  window.longrunLive = state;
  if (!source) { return; }
  var statusEl = document.querySelector("[data-live-status]");
  var logEl = document.querySelector("[data-live-log]");
  var seen = {};
  var running = false;
  var again = false;

  function setStatus(up) {
    if (!statusEl) { return; }
    statusEl.hidden = false;
    statusEl.textContent = up ? "live" : "reconnecting";
    statusEl.className = up ? "live-status" : "live-status down";
  }

  function replaceRegion(el, html) {
    if (el.contains(document.activeElement) && document.activeElement !== document.body) {
      // Never pull a form out from under the operator's cursor: retry once focus leaves.
      el.addEventListener("focusout", function () { schedule(); }, { once: true });
      return;
    }
    el.innerHTML = html;
  }

  function refreshOne(el) {
    return fetch(el.getAttribute("data-live-fragment"), { credentials: "same-origin" })
      .then(function (r) { return r.ok && !r.redirected ? r.text() : null; })
      .then(function (html) { if (html !== null) { replaceRegion(el, html); } })
      .catch(function () { /* the next event or reconnect tries again */ });
  }

  function schedule() {
    if (running) { again = true; return; }
    running = true;
    var regions = document.querySelectorAll("[data-live-fragment]");
    Promise.all(Array.prototype.map.call(regions, refreshOne)).then(function () {
      state.refreshes += 1;
      running = false;
      if (again) { again = false; schedule(); }
    });
  }

  function logEvents(doc) {
    (doc.events || []).forEach(function (e) {
      var key = doc.agent_id + ":" + e.seq;
      if (!logEl || seen[key]) { return; }
      seen[key] = true;
      var li = document.createElement("li");
      li.setAttribute("data-seq", String(e.seq));
      li.textContent = "#" + e.seq + " " + e.type + (e.work_item_id ? " " + e.work_item_id : "");
      logEl.insertBefore(li, logEl.firstChild);
      while (logEl.children.length > 200) { logEl.removeChild(logEl.lastChild); }
    });
  }

  function onLedger(message) {
    var doc;
    try { doc = JSON.parse(message.data); } catch (err) { return; }
    state.events += 1;
    state.lastEventId = message.lastEventId || state.lastEventId;
    state.arrivals.push([state.lastEventId, Date.now(), (doc.events[0] || {}).at || null]);
    if (state.arrivals.length > 5000) { state.arrivals.shift(); }
    logEvents(doc);
    schedule();
  }

  function resumeUrl() {
    if (!state.lastEventId || source.indexOf("after=") < 0) { return source; }
    return source.replace(/after=[^&]*/, "after=" + encodeURIComponent(state.lastEventId));
  }

  function connect(url) {
    var es = new EventSource(url);
    es.addEventListener("ledger", onLedger);
    es.onopen = function () {
      state.opened += 1;
      setStatus(true);
      if (state.opened > 1) { schedule(); }
    };
    es.onerror = function () {
      setStatus(false);
      if (es.readyState === EventSource.CLOSED) {
        // The browser gave up (e.g. an error answer while ingress restarted): start again,
        // from the last event this page has.
        setTimeout(function () { connect(resumeUrl()); }, 1000);
      }
    };
  }

  connect(source);
}());
