
"use strict";
(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const params = new URLSearchParams(window.location.search);
  let runId = params.get("run_id") || "";
  // the first /stats names the run shown; later requests pin it, so keep how it was chosen
  let selected = "";
  // counts older than this are labelled (as in `watch`): a large run's aggregates are re-read
  // less often than the page refreshes (the server's stats_age_s)
  const STALE_S = 2;
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"];
  // the states app.css colours; other text read from the store never becomes a class name
  const STATES = ["pending", "running", "succeeded", "failed", "interrupted", "canceled", "handed_off"];
  // a pipeline's route shows its newest ledger rows; the older ones are counted (and listed on
  // hover, up to HIDDEN_LINES of them)
  const MAX_HOPS = 4, HIDDEN_LINES = 20;

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }
  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const k in attrs) node.setAttribute(k, String(attrs[k]));
    return node;
  }
  function stateClass(v) { return STATES.indexOf(v) >= 0 ? v : null; }
  function titled(node, text) { node.setAttribute("title", text); return node; }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function short(v, n) {
    const s = typeof v === "string" ? v : JSON.stringify(v);
    return s && s.length > n ? s.slice(0, n - 1) + "\u2026" : s;
  }
  async function get(path, extra) {
    const q = new URLSearchParams(extra || {});
    if (runId) q.set("run_id", runId);
    const r = await fetch(path + "?" + q.toString(), { credentials: "same-origin", cache: "no-store" });
    if (!r.ok) throw new Error(path + ": HTTP " + r.status);
    return r.json();
  }
  // how long a long run has left, as watch prints it: 1h 02m, 12m 30s, 45s
  function duration(seconds) {
    const total = Math.max(0, Math.round(Number(seconds) || 0));
    const h = Math.floor(total / 3600), m = Math.floor((total % 3600) / 60), s = total % 60;
    const two = function (n) { return (n < 10 ? "0" : "") + n; };
    if (h) return h + "h " + two(m) + "m";
    return m ? m + "m " + two(s) + "s" : s + "s";
  }

  function card(parent, key, value) {
    const c = el("div", null, "card");
    c.appendChild(el("div", value === null || value === undefined ? "-" : value, "v"));
    c.appendChild(el("div", key, "k"));
    parent.appendChild(c);
  }
  function table(node, columns, rows) {
    clear(node);
    const head = el("tr");
    columns.forEach(function (c) { head.appendChild(el("th", c[0])); });
    node.appendChild(head);
    rows.forEach(function (row) {
      const tr = el("tr");
      columns.forEach(function (c) {
        const v = c[1](row);
        const td = el("td", null, c[0] === "state" ? stateClass(v) : null);
        if (v instanceof Node) td.appendChild(v);  // built with el(): text nodes only
        else td.textContent = v === null || v === undefined ? "" : String(v);
        tr.appendChild(td);
      });
      node.appendChild(tr);
    });
  }
  // a failure's whole traceback comes from the detail endpoint, only when asked for
  function tracebackLink(pipelineId) {
    const link = el("a", "show");
    link.href = "#traceback";
    link.addEventListener("click", async function () {
      const out = document.getElementById("traceback");
      try {
        const p = await get("/pipeline", { pipeline_id: pipelineId });
        out.textContent = p.traceback || "(no traceback stored)";
      } catch (err) {
        out.textContent = String(err);
      }
    });
    return link;
  }
  // task states per task name, as `watch` and `report` print them: handed_off=4 succeeded=6
  function stateCounts(states) {
    const box = el("span", null, "states");
    Object.keys(states || {}).forEach(function (s) {
      box.appendChild(el("span", s + "=" + states[s], stateClass(s)));
    });
    return box;
  }
  // the control ledger of a pipeline (docs/handoffs.md): each row a hop, `judge -> report`,
  // `judge -> end` (to_seq null), or `restart` (the traversal began again from the seed)
  function taskName(name, seq) {
    if (name) return short(String(name), 40);
    return seq === null || seq === undefined ? "?" : "#" + seq;
  }
  function hopText(h) {
    if (h.operation === "restart") return "restart";
    const to = h.to_seq === null || h.to_seq === undefined ? "end" : taskName(h.to_task, h.to_seq);
    return taskName(h.from_task, h.from_seq) + " \u2192 " + to;
  }
  function hopTitle(h) {
    const lines = [];
    if (h.operation === "restart") {
      lines.push("restart from the seed" + (h.to_task ? " at " + h.to_task : ""));
    } else {
      const to = h.to_seq === null || h.to_seq === undefined ? "end"
        : (h.to_task || "") + " (seq " + h.to_seq + ")";
      const from = (h.from_task || "") + " (seq " + h.from_seq + ")";
      lines.push((h.operation || "forward") + ": " + from + " \u2192 " + to);
    }
    if (h.reason) lines.push("reason: " + h.reason);
    if (h.run_id) lines.push("run: " + h.run_id);
    if (typeof h.ts === "number" && isFinite(h.ts)) lines.push("at: " + new Date(h.ts * 1000).toISOString());
    if (h.operation !== "restart" && h.entry_artifact_id) {
      lines.push("entry: " + h.entry_artifact_id + (h.entry_reused ? " (the input it received)" : ""));
    }
    return lines.join("\n");
  }
  function route(ledger) {
    if (!Array.isArray(ledger) || !ledger.length) return null;
    const box = el("span", null, "route");
    const hidden = ledger.slice(0, Math.max(0, ledger.length - MAX_HOPS));
    if (hidden.length) {
      const listed = hidden.slice(-HIDDEN_LINES).map(hopText);
      if (hidden.length > HIDDEN_LINES) listed.unshift("\u2026 " + (hidden.length - HIDDEN_LINES) + " more");
      box.appendChild(titled(el("span", "+" + hidden.length + " earlier", "more"), listed.join("\n")));
    }
    ledger.slice(-MAX_HOPS).forEach(function (h) {
      if (box.firstChild) box.appendChild(el("span", " \u00b7 ", "sep"));
      const cls = "hop " + (h.operation === "restart" ? "restart" : "forward");
      box.appendChild(titled(el("span", hopText(h), cls), hopTitle(h)));
    });
    return box;
  }
  function hasLedger(p) { return Array.isArray(p.handoffs) && p.handoffs.length > 0; }
  function frame(w, h) {
    return svg("svg", { width: w, height: h, viewBox: "0 0 " + w + " " + h, role: "img" });
  }
  function lineChart(node, series, w, h) {
    clear(node);
    const s = frame(w, h);
    let xs = [], ys = [];
    series.forEach(function (ser) { ser.points.forEach(function (p) { xs.push(p[0]); ys.push(p[1]); }); });
    if (!xs.length) { node.appendChild(el("p", "no data yet")); return; }
    const x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    const y0 = Math.min(0, Math.min.apply(null, ys)), y1 = Math.max.apply(null, ys);
    const sx = function (x) { return 30 + (x1 === x0 ? 0 : (x - x0) / (x1 - x0)) * (w - 40); };
    const sy = function (y) { return h - 15 - (y1 === y0 ? 0 : (y - y0) / (y1 - y0)) * (h - 30); };
    s.appendChild(svg("line", { x1: 30, y1: h - 15, x2: w - 10, y2: h - 15, stroke: "#999" }));
    const top = svg("text", { x: 2, y: 12 }); top.textContent = short(y1, 10); s.appendChild(top);
    series.forEach(function (ser, i) {
      const pts = ser.points.map(function (p) {
        return sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1);
      }).join(" ");
      const color = COLORS[i % COLORS.length];
      s.appendChild(svg("polyline", { points: pts, fill: "none", stroke: color, "stroke-width": 1.5 }));
      const label = svg("text", { x: 40 + i * 110, y: h - 2, fill: COLORS[i % COLORS.length] });
      label.textContent = short(ser.name, 18);
      s.appendChild(label);
    });
    node.appendChild(s);
  }
  function compact(n) {  // bucket labels that fit under narrow bars: 1k, 30k, 300k
    return n >= 1000 ? String(n / 1000) + "k" : String(n);
  }
  function barChart(node, bars, w, h) {
    clear(node);
    const s = frame(w, h);
    const max = Math.max.apply(null, bars.map(function (b) { return b[1]; }).concat([1]));
    const bw = (w - 20) / Math.max(1, bars.length);
    bars.forEach(function (b, i) {
      const bh = (b[1] / max) * (h - 30);
      s.appendChild(svg("rect", { x: 10 + i * bw, y: h - 15 - bh, width: Math.max(1, bw - 2), height: bh,
        fill: "#1f77b4" }));
      const t = svg("text", { x: 10 + i * bw, y: h - 3 }); t.textContent = b[0]; s.appendChild(t);
    });
    node.appendChild(s);
  }
  // a rate-limited resource: each limit's budget left, when it refills, and how long leases
  // waited for budget versus for a slot
  function budgetText(st) {
    const limits = st.limits;
    if (!limits || typeof limits !== "object") { return ""; }
    const parts = Object.keys(limits).map(function (k) {
      const w = limits[k] || {};
      return k + " " + w.left + "/" + w.limit + (w.refill_s ? " (" + w.refill_s + "s)" : "");
    });
    const waited = " waited budget " + Math.round(Number(st.waited_budget_ms) || 0) + "ms, slot " +
      Math.round(Number(st.waited_slot_ms) || 0) + "ms";
    return short(parts.join(", ") + waited, 60);
  }
  function utilisation(node, rows) {
    clear(node);
    if (!rows.length) { node.appendChild(el("p", "no resource rows yet")); return; }
    const h = 18 * rows.length + 10, w = 720;
    const s = frame(w, h);
    rows.forEach(function (r, i) {
      const st = r.stats || {};
      const cap = Number(st.capacity) || 0, act = Number(st.active) || 0;
      const y = 5 + i * 18;
      s.appendChild(svg("rect", { x: 150, y: y, width: 250, height: 12, fill: "#eee" }));
      s.appendChild(svg("rect", { x: 150, y: y, width: cap ? 250 * Math.min(1, act / cap) : 0, height: 12,
        fill: r.state === "ready" ? "#2ca02c" : (r.state === "dead" ? "#d62728" : "#ff7f0e") }));
      const t = svg("text", { x: 0, y: y + 10 });
      t.textContent = short(r.pool + "/" + r.resource_id, 22) + " " + act + "/" + cap + " " + r.state;
      s.appendChild(t);
      const budget = budgetText(st);
      if (budget) {
        const b = svg("text", { x: 410, y: y + 10 }); b.textContent = budget; s.appendChild(b);
      }
    });
    node.appendChild(s);
  }
  async function curves() {
    const node = document.getElementById("curves");
    const input = document.getElementById("curve-pipeline");
    const pid = input.value;
    if (!pid) { clear(node); node.appendChild(el("p", "type a pipeline id")); return; }
    const k = await get("/curves", { pipeline_id: pid });
    const series = [];
    for (const key of (k.keys || []).slice(0, 5)) {
      const c = await get("/curves", { pipeline_id: pid, key: key, limit: 1000 });
      series.push({ name: key, points: c.rows.filter(function (p) { return typeof p.value === "number"; })
        .map(function (p) { return [p.step, p.value]; }) });
    }
    lineChart(node, series, 420, 160);
  }
  async function refresh() {
    try {
      const st = await get("/stats");
      if (!selected) selected = st.run_selected;
      if (!runId && st.run_id) runId = st.run_id;
      document.getElementById("run").textContent =
        st.run_id ? "run " + st.run_id + " (" + selected + ")" : "all runs";
      document.getElementById("status").textContent = st.run ? "status " + st.run.status : "";
      const age = Number(st.stats_age_s) || 0;
      document.getElementById("age").textContent =
        age >= STALE_S ? "(counts " + Math.round(age) + " s old)" : "";
      const cards = document.getElementById("cards");
      clear(cards);
      // one run's counts are its share of the dataset: say so, and show where the whole stands
      const ds = st.dataset;
      const share = ds && (ds.total !== st.pipelines.total ||
        JSON.stringify(ds.by_state) !== JSON.stringify(st.pipelines.by_state));
      const whose = selected === "latest" ? " (latest run's share)" : " (this run's share)";
      card(cards, "pipelines" + (share ? whose : ""), st.pipelines.total);
      Object.keys(st.pipelines.by_state).forEach(function (k) {
        card(cards, k + (share ? whose : ""), st.pipelines.by_state[k]);
      });
      if (ds) {
        card(cards, "dataset (all runs)", ds.total);
        Object.keys(ds.by_state).forEach(function (k) { card(cards, k + " (all runs)", ds.by_state[k]); });
      }
      card(cards, "attempts", st.attempts_total);
      // like `watch` and `report`: the count appears once the run has committed a jump
      if (Number(st.handoffs_total) > 0) card(cards, "handoffs", st.handoffs_total);
      card(cards, "events", st.events_total);
      card(cards, "in flight", st.in_flight);
      card(cards, "parked", st.parked);
      card(cards, "p50 ms", st.latency_ms.p50);
      card(cards, "p95 ms", st.latency_ms.p95);
      card(cards, "attempts/s", st.throughput.attempts_per_s_recent);
      if (st.eta_s !== null && st.eta_s !== undefined) card(cards, "eta", duration(st.eta_s));
      const m = document.getElementById("metrics");
      clear(m);
      if (st.reported_metrics) {
        Object.keys(st.reported_metrics.run).forEach(function (k) {
          card(m, k, short(st.reported_metrics.run[k], 40));
        });
        Object.keys(st.reported_metrics.pipelines).forEach(function (k) {
          const s = st.reported_metrics.pipelines[k];
          card(m, k + " (latest of " + s.pipelines + ")", short(s.latest, 40));
        });
      }
      lineChart(document.getElementById("throughput"),
        [{ name: "attempts/s",
           points: st.throughput_series.map(function (p) { return [p.t, p.per_s]; }) }], 420, 160);
      barChart(document.getElementById("latency"), st.latency_histogram.map(function (b) {
        return [b.le_ms === null ? "\u221e" : compact(b.le_ms), b.count]; }), 420, 160);
      table(document.getElementById("events"), [["id", function (e) { return e.event_id; }],
        ["kind", function (e) { return e.kind; }], ["pipeline", function (e) { return e.pipeline_id; }],
        ["pool", function (e) { return e.pool; }], ["data", function (e) { return short(e.data, 160); }]],
        st.recent_events.slice().reverse());
      const res = await get("/resources", { limit: 200 });
      utilisation(document.getElementById("resources"), res.rows);
      const errs = await get("/errors", { limit: 50 });
      table(document.getElementById("errors"), [["pipeline", function (e) { return e.key; }],
        ["task", function (e) { return e.failed_task; }], ["type", function (e) { return e.error_type; }],
        ["message", function (e) { return short(e.error_message, 300); }],
        ["where", function (e) { return short(e.last_frame, 200); }],
        ["traceback", function (e) { return tracebackLink(e.pipeline_id); }]], errs.rows);
      const byName = (st.tasks && st.tasks.by_name) || {};
      table(document.getElementById("tasks"), [["task", function (t) { return t.name; }],
        ["states", function (t) { return stateCounts(t.states); }]],
        Object.keys(byName).map(function (k) { return { name: k, states: byName[k] }; }));
      const pl = await get("/pipelines", { limit: 50 });
      const columns = [["pipeline", function (p) { return p.key; }],
        ["name", function (p) { return p.name; }], ["state", function (p) { return p.state; }],
        ["tasks", function (p) { return p.n_tasks_done + "/" + p.n_tasks_total; }],
        ["attempts", function (p) { return p.attempts_total; }],
        ["metrics", function (p) { return short(p.reported_metrics, 120); }]];
      // the route column appears once a pipeline shown has a ledger row (a store of schema 2,
      // or a run without jumps, has none)
      if (pl.rows.some(hasLedger)) {
        columns.splice(3, 0, ["route", function (p) { return route(p.handoffs); }]);
      }
      table(document.getElementById("pipelines"), columns, pl.rows);
      const input = document.getElementById("curve-pipeline");
      if (!input.value && pl.rows.length) input.value = pl.rows[0].pipeline_id;
      await curves();
      await experiments();
    } catch (err) {
      document.getElementById("status").textContent = String(err);
    }
  }
  // a suite directory's experiments side by side (as `report DIR` prints them); a plain store
  // has no /experiments, asked once
  let suite = true;
  async function experiments() {
    if (!suite) return;
    let doc;
    try { doc = await get("/experiments"); } catch (err) { suite = false; return; }
    const names = [];
    doc.experiments.forEach(function (r) {
      Object.keys(r.metrics).forEach(function (k) { if (names.indexOf(k) < 0) names.push(k); });
    });
    names.sort();
    const columns = [["experiment", function (r) { return r.experiment_id; }],
      ["label", function (r) { return r.label; }], ["total", function (r) { return r.total; }],
      ["succeeded", function (r) { return r.succeeded; }], ["failed", function (r) { return r.failed; }],
      ["p50 ms", function (r) { return r.p50_ms; }], ["p95 ms", function (r) { return r.p95_ms; }]];
    names.forEach(function (k) { columns.push([k, function (r) { return r.metrics[k]; }]); });
    table(document.getElementById("experiments"), columns, doc.experiments);
    document.getElementById("experiments-view").hidden = false;
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.getElementById("curve-pipeline").addEventListener("change", curves);
    refresh();
    setInterval(refresh, 2000);
  });
})();
