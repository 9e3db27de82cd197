// shep ui: live updates for the pages shep serves. No framework, no build step.
//
// Each page says the log position it shows (body[data-after]); one EventSource
// streams what happens after it (the page's run only, on a run's page). A
// message either carries what to show (an output line, the inbox count) or
// says that a live region of the page (an element with data-live-src) changed,
// and that region is fetched again from the server, which renders and escapes
// it. Text from the stream goes into the page as text (textContent), never as HTML.
"use strict";

(function () {
  const body = document.body;
  const page = body.dataset.page;
  const run = body.dataset.run || "";
  const csrf = body.dataset.csrf;
  let after = parseInt(body.dataset.after || "0", 10);
  const live = document.getElementById("live");
  const ITEM_EVENTS = new Set([
    "QuestionAsked", "ApprovalRequested", "QuestionAnswered", "ApprovalGranted",
    "ApprovalRejected", "ApprovalVoted", "SupervisorDecisionMade", "RunCancelled", "RunFailed",
  ]);

  // --- ages: "12s", "5m", kept current every second -------------------------------------
  function age(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    if (s >= 86400) return Math.floor(s / 86400) + "d";
    if (s >= 3600) return Math.floor(s / 3600) + "h";
    if (s >= 60) return Math.floor(s / 60) + "m";
    return s + "s";
  }
  function tickAges() {
    const now = Date.now();
    for (const el of document.querySelectorAll("[data-since]")) {
      const since = Date.parse(el.dataset.since);
      if (isNaN(since)) continue;
      const elapsed = now - since;
      let text = age(elapsed);
      const stale = parseFloat(el.dataset.stale || "");
      if (!isNaN(stale) && elapsed / 1000 > stale) text += " (stale)";
      if (el.textContent !== text) el.textContent = text;
    }
  }
  setInterval(tickAges, 1000);

  // --- live regions: fetched again, at most one request at a time each --------------------
  const MIN_GAP = 200;
  function refresh(region) {
    if (region._busy) { region._again = true; return; }
    region._busy = true;
    const started = Date.now();
    fetch(region.dataset.liveSrc, { headers: { "X-Requested-With": "fetch" }, credentials: "same-origin" })
      .then((r) => (r.ok ? r.text() : Promise.reject(r.status)))
      .then((html) => {
        if (live && live.dataset.failed) { delete live.dataset.failed; live.textContent = "live"; live.className = "live on"; }
        if (region.hasAttribute("data-live-merge")) merge(region, html);
        else region.innerHTML = html;
        afterRefresh(region);
        tickAges();
      })
      .catch(() => {
        // The page no longer shows the log as it is: say so rather than look current.
        if (live) { live.dataset.failed = "1"; live.textContent = "not updating (reload)"; live.className = "live off"; }
      })
      .finally(() => {
        const wait = Math.max(0, MIN_GAP - (Date.now() - started));
        setTimeout(() => {
          region._busy = false;
          if (region._again) { region._again = false; refresh(region); }
        }, wait);
      });
  }

  // Keyed by id: an item whose version (data-v) is unchanged is kept as it is, so a
  // half-written answer survives; a changed one is replaced, a gone one removed.
  function merge(region, html) {
    const next = document.createElement("template");
    next.innerHTML = html;
    const seen = new Set();
    let previous = null;
    for (const fresh of Array.from(next.content.children)) {
      seen.add(fresh.id);
      let current = fresh.id ? document.getElementById(fresh.id) : null;
      if (current && current.parentNode === region) {
        if (current.dataset.v !== fresh.dataset.v) {
          current.replaceWith(fresh);
          current = fresh;
        }
      } else {
        current = fresh;
      }
      if (previous) previous.after(current); else region.prepend(current);
      previous = current;
    }
    for (const old of Array.from(region.children)) if (!seen.has(old.id)) old.remove();
    if (region.id === "items") {
      const shown = Array.from(region.querySelectorAll("section.item")).map((s) => s.id.slice(5));
      region.dataset.liveSrc = "/fragment/inbox?shown=" + shown.join(",");
    }
  }

  function afterRefresh(region) {
    if (region.id === "frames") {
      const list = region.querySelector("ol");
      const scrubber = document.getElementById("scrubber");
      if (list && scrubber) {
        scrubber.max = list.dataset.count;
        showScrubber();
      }
    }
  }

  function wants(region, msg) {
    switch (region.dataset.liveOn) {
      case "run": return !msg.output && msg.t !== "HeartbeatRecorded";
      case "runs": return Boolean(msg.run) && !msg.output && msg.t !== "HeartbeatRecorded";
      case "items": return ITEM_EVENTS.has(msg.t) || msg.t === "inbox";
      default: return false;
    }
  }

  // --- the run's output, appended as it comes --------------------------------------------
  function logLine(msg) {
    const log = document.getElementById("log");
    if (!log || !msg.log) return;
    const last = parseInt(log.dataset.last || "0", 10);
    if (msg.p <= last) return;
    log.dataset.last = String(msg.p);
    const li = document.createElement("li");
    li.dataset.p = String(msg.p);
    li.className = "kind-" + String(msg.kind).replace(/\./g, "-") + (msg.err ? " error" : "");
    const parts = [
      ["time", (msg.at || "").slice(11, 19)],
      ["span", msg.node, "node"],
      ["span", msg.kind + (msg.tool && !String(msg.text).includes(msg.tool) ? " " + msg.tool : ""), "kind"],
      ["span", msg.text, "text"],
    ];
    for (const [tag, text, cls] of parts) {
      if (!text) continue;
      const el = document.createElement(tag);
      if (cls) el.className = cls;
      el.textContent = text;
      li.appendChild(el);
    }
    log.appendChild(li);
    const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
    if (atBottom) li.scrollIntoView({ block: "end" });
  }

  function inboxCount(count) {
    const el = document.getElementById("inbox-count");
    if (!el) return;
    el.dataset.count = String(count);
    el.textContent = count + " waiting in the inbox";
    el.classList.toggle("some", count > 0);
  }

  function onMessage(event) {
    let msg;
    try { msg = JSON.parse(event.data); } catch (e) { return; }
    if (msg.t === "inbox") { inboxCount(msg.count); }
    else if (typeof msg.p === "number") { after = Math.max(after, msg.p); }
    if (msg.t === "HeartbeatRecorded" && msg.run === run) {
      for (const el of document.querySelectorAll("[data-heartbeat]")) el.dataset.since = msg.at;
    }
    logLine(msg);
    for (const region of document.querySelectorAll("[data-live-src]")) {
      if (wants(region, msg)) refresh(region);
    }
    body.dataset.seen = String(after);
  }

  // --- the stream ------------------------------------------------------------------------
  function connect() {
    const url = "/events?after=" + after + (run ? "&run=" + run : "");
    const source = new EventSource(url);
    source.onopen = () => { if (live) { live.textContent = "live"; live.className = "live on"; } };
    source.onerror = () => {
      if (!live) return;
      // Closed for good (the server stopped following the log, or stopped): say so.
      live.textContent = source.readyState === EventSource.CLOSED ? "not live (reload)" : "reconnecting";
      live.className = "live off";
    };
    source.onmessage = onMessage;
    source.addEventListener("reload", () => { source.close(); location.reload(); });
  }
  if (page !== "error" && page !== "done") connect();

  // --- actions: posted with the CSRF token, answered in place ---------------------------
  document.addEventListener("submit", (event) => {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.hasAttribute("data-action")) return;
    event.preventDefault();
    const result = form.querySelector("output.result");
    const button = form.querySelector("button[type=submit]");
    if (button) button.disabled = true;
    fetch(form.action, {
      method: "POST",
      body: new URLSearchParams(new FormData(form)),
      headers: { "X-CSRF-Token": csrf },
      credentials: "same-origin",
    })
      .then((r) => r.json().catch(() => ({ ok: false, message: "HTTP " + r.status })))
      .then((reply) => {
        if (result) {
          result.textContent = reply.message;
          result.className = "result " + (reply.ok ? "ok" : "error");
        }
        const section = form.closest("section.item");
        if ((!reply.ok || !section) && button) button.disabled = false;
        if (reply.ok && section) section.dataset.v = "decided";
      })
      .catch(() => { if (button) button.disabled = false; });
  });

  // --- replay: the scrubber -------------------------------------------------------------
  const scrubber = document.getElementById("scrubber");
  function showScrubber() {
    const at = document.getElementById("scrubber-at");
    if (scrubber && at) at.textContent = scrubber.value + "/" + scrubber.max;
  }
  function showFrame(n) {
    if (!scrubber) return;
    const runId = scrubber.dataset.run;
    scrubber.value = String(n);
    showScrubber();
    fetch("/runs/" + runId + "/replay/" + n, { credentials: "same-origin" })
      .then((r) => r.text())
      .then((html) => {
        document.getElementById("frame").innerHTML = html;
        history.replaceState(null, "", "/runs/" + runId + "/replay?frame=" + n);
        const frames = document.getElementById("frames");
        if (frames) {
          frames.dataset.liveSrc = "/runs/" + runId + "/replay/frames?frame=" + n;
          for (const li of frames.querySelectorAll("li")) li.classList.remove("current");
          const link = frames.querySelector('a[data-frame="' + n + '"]');
          if (link) link.parentElement.classList.add("current");
        }
      });
  }
  if (scrubber) {
    scrubber.addEventListener("input", () => showFrame(scrubber.value));
    document.addEventListener("click", (event) => {
      const link = event.target.closest && event.target.closest("a[data-frame]");
      if (!link) return;
      event.preventDefault();
      showFrame(link.dataset.frame);
    });
  }

  // --- keys -----------------------------------------------------------------------------
  // The item the keys act on: the one focused (or holding the focus), else the only one.
  function currentItem() {
    const active = document.activeElement;
    const held = active && active.closest && active.closest("section.item");
    if (held) return held;
    const all = document.querySelectorAll("section.item");
    return all.length === 1 ? all[0] : null;
  }

  // Keys never decide alone: they pick and focus, and Enter (or a click) submits.
  function decideKey(key) {
    const item = currentItem();
    if (!item) return false;
    const answer = item.querySelector("form[action$='/answer']");
    if (/^[1-9]$/.test(key) && answer) {
      const option = answer.querySelectorAll("input[name=option]")[parseInt(key, 10) - 1];
      if (!option) return false;
      option.checked = true;
      answer.querySelector("button[type=submit]").focus();
      return true;
    }
    if (key === "t" && answer && answer.querySelector("input[name=text]")) {
      answer.querySelector("input[name=text]").focus();
      return true;
    }
    if (key === "a") {
      const approve = item.querySelector("form[action$='/approve'] input[name=comment]");
      const target = approve || (answer && answer.querySelector("button[type=submit]"));
      if (target) { target.focus(); return true; }
    }
    if (key === "r") {
      const reason = item.querySelector("form[action$='/reject'] input[name=reason]");
      if (reason) { reason.focus(); return true; }
    }
    return false;
  }

  document.addEventListener("keydown", (event) => {
    const typing = event.target.closest && event.target.closest("input, textarea, select");
    if (event.key === "Escape" && typing) {
      const item = typing.closest("section.item");
      if (item) { event.preventDefault(); item.focus(); }
      return;
    }
    if (typing || event.ctrlKey || event.metaKey || event.altKey) return;
    if ((page === "inbox" || page === "item") && decideKey(event.key)) {
      event.preventDefault();
    } else if (event.key === "/") {
      const search = document.getElementById("search");
      if (search) { event.preventDefault(); search.focus(); }
    } else if ((event.key === "j" || event.key === "k") && page === "inbox") {
      const items = Array.from(document.querySelectorAll("section.item"));
      if (!items.length) return;
      const at = items.indexOf(document.activeElement);
      const next = event.key === "j" ? Math.min(at + 1, items.length - 1) : Math.max(at - 1, 0);
      items[next].focus();
      items[next].scrollIntoView({ block: "nearest" });
    } else if (scrubber && (event.key === "ArrowLeft" || event.key === "ArrowRight")) {
      const n = parseInt(scrubber.value, 10) + (event.key === "ArrowRight" ? 1 : -1);
      if (n >= 1 && n <= parseInt(scrubber.max, 10)) showFrame(n);
    }
  });
})();
