// orch ui: live stage colours over server-sent events, and the buttons.
// No text from a run is ever inserted as HTML: only textContent and
// class names built from a fixed list of statuses.
"use strict";
(function () {
  const token = (document.querySelector('meta[name="orch-token"]') || {}).content || "";
  const STATUSES = ["pending", "running", "succeeded", "failed", "skipped", "blocked", "rolled_back", "no_change",
    "starting", "interrupted"];
  const safe = (s) => (STATUSES.includes(s) ? s : "pending");

  // An action's result outlives the reload it causes (and one the event
  // stream causes: an answered ask changes the asks, the run may end), and
  // a reload waits for an action still in flight, so its confirmation is
  // never lost.
  const KEPT = "orch-action-result";
  let pending = 0;
  let reloadWanted = false;
  function show(msg, ok) {
    const out = document.getElementById("action-result");
    if (out) { out.textContent = msg; out.className = ok ? "result ok" : "result err"; }
  }
  function reloadSoon(ms) {
    if (pending > 0) { reloadWanted = true; return; }
    setTimeout(() => location.reload(), ms);
  }
  try {
    const kept = JSON.parse(sessionStorage.getItem(KEPT) || "null");
    sessionStorage.removeItem(KEPT);
    const here = document.getElementById("run-meta");
    if (kept && here && kept.run === here.dataset.run) show(String(kept.msg), kept.ok === true);
  } catch (_) { /* no storage: the result is shown until the reload only */ }

  // `reload`: the action changes what the page shows (rollback, resume,
  // an answered ask); guidance does not.
  function post(path, body, reload) {
    const meta = document.getElementById("run-meta");
    if (!meta) return;
    pending += 1;
    const done = (msg, ok) => {
      pending -= 1;
      show(msg, ok);
      try {
        sessionStorage.setItem(KEPT, JSON.stringify({ run: meta.dataset.run, msg, ok }));
      } catch (_) { /* shown only */ }
      if ((ok && reload) || (reloadWanted && pending === 0)) setTimeout(() => location.reload(), 800);
    };
    fetch("/run/" + encodeURIComponent(meta.dataset.run) + "/" + path, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Orch-Token": token },
      body: JSON.stringify(body),
      credentials: "same-origin",
    })
      .then((r) => r.text().then((t) => ({ ok: r.ok, t })))
      .then(({ ok, t }) => {
        let msg = t;
        try { msg = JSON.parse(t).message || t; } catch (_) { /* plain text error */ }
        done(msg, ok);
      })
      .catch((e) => done(String(e), false));
  }

  document.addEventListener("click", (ev) => {
    const b = ev.target.closest("button.act");
    if (!b) return;
    ev.preventDefault();
    let body = {};
    try { body = JSON.parse(b.dataset.body || "{}"); } catch (_) { /* empty body */ }
    post(b.dataset.post, body, true);
  });

  document.addEventListener("submit", (ev) => {
    const f = ev.target;
    ev.preventDefault();
    const stage = f.elements.stage ? f.elements.stage.value : "";
    if (f.dataset.kind === "rollback") post("rollback", { stage }, true);
    if (f.dataset.kind === "guide") {
      post("stage/" + encodeURIComponent(stage) + "/guide", { text: f.elements.text.value }, false);
      f.elements.text.value = "";
    }
  });

  const meta = document.getElementById("run-meta");
  if (!meta || meta.dataset.live !== "true" || !window.EventSource) return;
  const es = new EventSource("/run/" + encodeURIComponent(meta.dataset.run) + "/events");
  es.addEventListener("end", () => { es.close(); reloadSoon(300); });
  es.onmessage = (m) => {
    let snap;
    try { snap = JSON.parse(m.data); } catch (_) { return; }
    // A new ask (or one answered elsewhere): the page shows the asks anew.
    if (snap.asks !== meta.dataset.asks) { es.close(); reloadSoon(0); return; }
    const rs = document.querySelector("#run-status .badge");
    if (rs) { rs.textContent = safe(snap.status); rs.className = "badge st-" + safe(snap.status); }
    const rc = document.getElementById("run-cost");
    if (rc) rc.textContent = snap.cost;
    for (const s of snap.stages) {
      const st = safe(s.status);
      for (const node of document.querySelectorAll("g.node")) {
        if (node.dataset.stage !== s.id) continue;
        // Keep the node's other marks (rework, replica, chosen, selecting).
        const marks = ["rework", "replica", "chosen", "selecting"].filter((c) => node.classList.contains(c));
        node.setAttribute("class", ["node", "st-" + st].concat(marks).join(" "));
        node.dataset.status = st;
        const t = node.querySelector(".status");
        if (t) t.textContent = st;
      }
      for (const row of document.querySelectorAll("#stages tr[data-stage]")) {
        if (row.dataset.stage !== s.id) continue;
        const b = row.querySelector(".c-status .badge");
        if (b) { b.textContent = st; b.className = "badge st-" + st; }
        row.querySelector(".c-turns").textContent = s.turns;
        row.querySelector(".c-tokens").textContent = s.tokens;
        row.querySelector(".c-cost").textContent = s.cost;
      }
    }
  };
})();
