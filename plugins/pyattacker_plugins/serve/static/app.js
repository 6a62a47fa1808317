
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
  // the pipeline's own page (pipeline.html): attempts, leases, artifacts, logs
  function pipelineLink(pipelineId, text) {
    const link = el("a", text);
    link.href = "/pipeline.html?" + new URLSearchParams({ pipeline_id: pipelineId }).toString();
    return link;
  }
  // failures by error class (/failures): a count and one example each
  async function failureGroups() {
    const f = await get("/failures");
    table(document.getElementById("failure-groups"), [["error", function (g) { return g.error_type; }],
      ["class", function (g) { return g.error_class; }],
      ["count", function (g) { return g.count; }],
      ["tasks", function (g) { return short(g.tasks, 120); }],
      ["example", function (g) { return pipelineLink(g.example.pipeline_id, g.example.key); }],
      ["message", function (g) { return short(g.example.error_message, 300); }],
      ["where", function (g) { return short(g.example.last_frame, 200); }]], f.groups);
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
    if (h.operation === "rewind" || h.operation === "retry_all") {
      // a backward move: which visit left and which one it entered (`judge#0 \u21ba ask#1`)
      const tag = h.operation === "rewind" ? " \u21ba " : " \u21ba\u21ba ";
      return taskName(h.from_task, h.from_seq) + "#" + (h.from_visit || 0) + tag + to + "#" + (h.to_visit || 0);
    }
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
      if (h.operation === "rewind" || h.operation === "retry_all") {
        lines.push("visits: left " + (h.from_visit || 0) + ", entered " + (h.to_visit || 0));
      }
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
      const cls = "hop " + (h.operation === "restart" ? "restart"
        : h.operation === "rewind" || h.operation === "retry_all" ? "backward" : "forward");
      box.appendChild(titled(el("span", hopText(h), cls), hopTitle(h)));
    });
    return box;
  }
  function hasLedger(p) { return Array.isArray(p.handoffs) && p.handoffs.length > 0; }
  function frame(w, h) {
    return svg("svg", { width: w, height: h, viewBox: "0 0 " + w + " " + h, role: "img" });
  }
  const H = window.PyaCharts;
  // a rate-limited resource: each limit's budget left, when it refills, and how long leases
  // waited for budget versus for a slot
  function budgetText(st) {
    const limits = st.limits;
    if (!limits || typeof limits !== "object") { return ""; }
    const parts = Object.keys(limits).map(function (k) {
      const w = limits[k] || {};
      return k + " " + w.left + "/" + w.limit + (w.refill_s ? " (" + H.seconds(Number(w.refill_s)) + ")" : "");
    });
    const waited = " waited budget " + H.ms(Number(st.waited_budget_ms) || 0) + ", slot " +
      H.ms(Number(st.waited_slot_ms) || 0);
    return short(parts.join(", ") + waited, 60);
  }
  // the states a resource's health is drawn in (the legend says which colour is which)
  const HEALTH = { ready: "#2ca02c", degraded: "#ff7f0e", dead: "#d62728" };
  function utilisation(node, rows) {
    clear(node);
    if (!rows.length) { node.appendChild(el("p", "no resource rows yet", "empty")); return; }
    const legend = el("p", null, "legend");
    Object.keys(HEALTH).forEach(function (k) { legend.appendChild(el("span", k, "health-" + k)); });
    node.appendChild(legend);
    const h = 18 * rows.length + 10, w = 720;
    const s = frame(w, h);
    rows.forEach(function (r, i) {
      const st = r.stats || {};
      const cap = Number(st.capacity) || 0, act = Number(st.active) || 0;
      const y = 5 + i * 18;
      s.appendChild(svg("rect", { x: 150, y: y, width: 250, height: 12, fill: "#eee" }));
      s.appendChild(svg("rect", { x: 150, y: y, width: cap ? 250 * Math.min(1, act / cap) : 0, height: 12,
        fill: HEALTH[r.state] || HEALTH.degraded }));
      const t = svg("text", { x: 0, y: y + 10 });
      const used = cap ? " (" + Math.round(100 * act / cap) + " %)" : "";
      t.textContent = short(r.pool + "/" + r.resource_id, 22) + " " + act + "/" + cap + used + " " + r.state;
      s.appendChild(t);
      const budget = budgetText(st);
      if (budget) {
        const b = svg("text", { x: 410, y: y + 10 }); b.textContent = budget; s.appendChild(b);
      }
    });
    node.appendChild(s);
  }
  // throughput and error rate, then latency percentiles, per time bucket of the run's span
  function timeline(tl) {
    const buckets = tl.buckets || [];
    const xs = buckets.map(function (b) { return b.t; });
    const pick = function (k) { return buckets.map(function (b) { return b[k]; }); };
    const through = document.getElementById("throughput"), lat = document.getElementById("latency");
    if (!buckets.length) {
      [through, lat].forEach(function (n) { clear(n); n.appendChild(el("p", "no attempts yet", "empty")); });
      return;
    }
    const width = tl.width_s ? " per " + H.ms(tl.width_s * 1000) + " bucket" : "";
    document.getElementById("bucket").textContent = width;
    H.time(through, ["attempts/s", "failed/s", "error rate"], ["y", "y", "%"],
      xs, [pick("per_s"), buckets.map(function (b) { return b.failed / (tl.width_s || 1); }), pick("error_rate")]);
    H.time(lat, ["p50", "p95", "p99"], ["ms", "ms", "ms"], xs, [pick("p50_ms"), pick("p95_ms"), pick("p99_ms")]);
  }
  // metric curves: the figure appears only for a run or pipeline that records some
  async function curves(pid, label) {
    const fig = document.getElementById("curves-figure"), node = document.getElementById("curves");
    const scopes = pid ? ["", pid] : [""];
    for (const scope of scopes) {
      const k = await get("/curves", { pipeline_id: scope });
      const keys = (k.keys || []).slice(0, 5);
      if (!keys.length) continue;
      const steps = {}, values = keys.map(function () { return {}; });
      for (let i = 0; i < keys.length; i++) {
        const c = await get("/curves", { pipeline_id: scope, key: keys[i], limit: 1000 });
        c.rows.forEach(function (p) {
          if (typeof p.value === "number") { steps[p.step] = true; values[i][p.step] = p.value; }
        });
      }
      const xs = Object.keys(steps).map(Number).sort(function (a, b) { return a - b; });
      const ys = values.map(function (v) { return xs.map(function (x) { return x in v ? v[x] : null; }); });
      document.getElementById("curve-scope").textContent = scope ? "pipeline " + short(label || scope, 24) : "run";
      fig.hidden = false;
      H.steps(node, keys.map(function (key) { return short(key, 24); }), xs, ys);
      return;
    }
    fig.hidden = true;
  }

  // -- the pipelines table: filters, order and keyset pages -----------------------------------------
  const filters = { state: "", task: "", error_class: "", q: "", sort: "created", order: "asc" };
  // the cursors of the pages before this one (the first page has none): "previous" pops one
  const pages = { before: [], after: "", next: null };
  function pipelineDuration(p) {
    return typeof p.started_at === "number" && typeof p.finished_at === "number"
      ? H.seconds(p.finished_at - p.started_at) : "";
  }
  async function loadPipelines() {
    const q = { limit: 50 };
    Object.keys(filters).forEach(function (k) { if (filters[k]) q[k] = filters[k]; });
    if (pages.after) q.after = pages.after;
    const pl = await get("/pipelines", q);
    pages.next = pl.next;
    const columns = [["pipeline", function (p) { return pipelineLink(p.pipeline_id, p.key); }],
      ["name", function (p) { return p.name; }], ["state", function (p) { return p.state; }],
      ["tasks", function (p) { return p.n_tasks_done + "/" + p.n_tasks_total; }],
      ["attempts", function (p) { return H.count(p.attempts_total); }],
      ["duration", pipelineDuration],
      ["metrics", function (p) { return short(p.reported_metrics, 120); }]];
    // the route column appears once a pipeline shown has a ledger row (a store of schema 2,
    // or a run without jumps, has none)
    if (pl.rows.some(hasLedger)) {
      columns.splice(3, 0, ["route", function (p) { return route(p.handoffs); }]);
    }
    table(document.getElementById("pipelines"), columns, pl.rows);
    // a filter no index serves looks at pl.searched pipelines per page: say so, and "next" goes on
    const more = pl.searched ? "searched the next " + H.count(pl.searched) + " pipelines; more\u2026" : "";
    if (!pl.rows.length) {
      const tr = el("tr"), td = el("td", more ? "no match yet: " + more : "no pipeline matches", "empty");
      td.setAttribute("colspan", String(columns.length));
      tr.appendChild(td);
      document.getElementById("pipelines").appendChild(tr);
    }
    document.getElementById("page-number").textContent =
      "page " + (pages.before.length + 1) + (more ? " (" + more + ")" : "");
    document.getElementById("page-prev").disabled = !pages.before.length;
    document.getElementById("page-next").disabled = !pl.next;
    return pl;
  }
  function showError(err) { document.getElementById("status").textContent = String(err); }
  function repage(how) {
    if (how === "next" && pages.next) { pages.before.push(pages.after); pages.after = pages.next; }
    else if (how === "prev" && pages.before.length) { pages.after = pages.before.pop(); }
    else if (how === "first") { pages.before = []; pages.after = ""; }
    loadPipelines().catch(showError);
  }
  function bindFilters() {
    Object.keys(filters).forEach(function (k) {
      const input = document.getElementById("filter-" + k);
      input.addEventListener("change", function () { filters[k] = input.value.trim(); repage("first"); });
    });
    document.getElementById("page-next").addEventListener("click", function () { repage("next"); });
    document.getElementById("page-prev").addEventListener("click", function () { repage("prev"); });
    document.getElementById("page-first").addEventListener("click", function () { repage("first"); });
  }
  // the task filter offers the run's task names (read from the store: option text, never markup)
  function taskOptions(names) {
    const select = document.getElementById("filter-task");
    const have = Array.prototype.map.call(select.options, function (o) { return o.value; });
    names.forEach(function (name) {
      if (have.indexOf(name) < 0) { const o = el("option", short(name, 40)); o.value = name; select.appendChild(o); }
    });
  }

  let painted = false;
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
      card(cards, "pipelines" + (share ? whose : ""), H.count(st.pipelines.total));
      Object.keys(st.pipelines.by_state).forEach(function (k) {
        card(cards, k + (share ? whose : ""), H.count(st.pipelines.by_state[k]));
      });
      if (ds) {
        card(cards, "dataset (all runs)", H.count(ds.total));
        Object.keys(ds.by_state).forEach(function (k) { card(cards, k + " (all runs)", H.count(ds.by_state[k])); });
      }
      card(cards, "attempts", H.count(st.attempts_total));
      // like `watch` and `report`: the count appears once the run has committed a jump
      if (Number(st.handoffs_total) > 0) card(cards, "handoffs", H.count(st.handoffs_total));
      card(cards, "events", H.count(st.events_total));
      card(cards, "in flight", H.count(st.in_flight));
      card(cards, "parked", H.count(st.parked));
      card(cards, "p50 latency", H.ms(st.latency_ms.p50));
      card(cards, "p95 latency", H.ms(st.latency_ms.p95));
      card(cards, "attempts/s", H.number(st.throughput.attempts_per_s_recent));
      if (st.eta_s !== null && st.eta_s !== undefined) card(cards, "eta", duration(st.eta_s));
      const m = document.getElementById("metrics");
      clear(m);
      if (st.reported_metrics) {
        const shown = function (v) { return typeof v === "number" ? H.number(v) : short(v, 40); };
        Object.keys(st.reported_metrics.run).forEach(function (k) {
          card(m, k, shown(st.reported_metrics.run[k]));
        });
        Object.keys(st.reported_metrics.pipelines).forEach(function (k) {
          const s = st.reported_metrics.pipelines[k];
          card(m, k + " (latest of " + H.count(s.pipelines) + ")", shown(s.latest));
        });
      }
      document.getElementById("metrics-section").hidden = !m.firstChild;
      timeline(await get("/timeline"));
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
      taskOptions(Object.keys(byName));
      table(document.getElementById("tasks"), [["task", function (t) { return t.name; }],
        ["states", function (t) { return stateCounts(t.states); }]],
        Object.keys(byName).map(function (k) { return { name: k, states: byName[k] }; }));
      await failureGroups();
      const pl = await loadPipelines();
      await curves(pl.rows.length ? pl.rows[0].pipeline_id : "", pl.rows.length ? pl.rows[0].key : "");
      await experiments();
    } catch (err) {
      showError(err);
      // what the first paint could not load says so instead of loading forever
      document.querySelectorAll(".loading").forEach(function (n) { n.textContent = "could not load"; });
    } finally {
      if (!painted) { painted = true; document.body.removeAttribute("aria-busy"); }
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
    bindFilters();
    refresh();
    setInterval(refresh, 2000);
  });
})();
