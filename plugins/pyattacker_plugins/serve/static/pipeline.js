"use strict";
// One pipeline in full (/pipeline?pipeline_id=...), and its task logs as they are committed
// (/logs/stream, Server-Sent Events). Every node is built with createElement/textContent:
// stored text is shown as the characters it is, never parsed as markup.
(function () {
  const params = new URLSearchParams(window.location.search);
  const pid = params.get("pipeline_id") || "";
  const STATES = ["pending", "running", "succeeded", "failed", "interrupted", "canceled", "handed_off"];
  let lastLog = 0;

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function short(v, n) {
    const s = typeof v === "string" ? v : JSON.stringify(v);
    return s && s.length > n ? s.slice(0, n - 1) + "\u2026" : s;
  }
  function ms(v) {
    if (v === null || v === undefined) return "";
    const n = Number(v);
    return n >= 1000 ? (n / 1000).toFixed(2) + " s" : n.toFixed(1) + " ms";
  }
  function clock(ts) {
    return ts ? new Date(ts * 1000).toISOString().replace("T", " ").slice(0, 23) : "";
  }
  function bytes(n) {
    if (n === null || n === undefined) return "";
    return n >= 1048576 ? (n / 1048576).toFixed(1) + " MiB" : n >= 1024 ? (n / 1024).toFixed(1) + " KiB" : n + " B";
  }
  function header(node, columns) {
    const head = el("tr");
    columns.forEach(function (c) { head.appendChild(el("th", c[0])); });
    node.appendChild(head);
  }
  function addRow(node, columns, row) {
    const tr = el("tr");
    columns.forEach(function (c) {
      const v = c[1](row);
      const td = el("td", null, c[0] === "state" || c[0] === "outcome" ? (STATES.indexOf(v) >= 0 ? v : null) : null);
      td.textContent = v === null || v === undefined ? "" : String(v);
      tr.appendChild(td);
    });
    node.appendChild(tr);
  }
  function table(id, columns, rows) {
    const node = document.getElementById(id);
    clear(node);
    header(node, columns);
    rows.forEach(function (r) { addRow(node, columns, r); });
  }
  function card(parent, key, value) {
    const c = el("div", null, "card");
    c.appendChild(el("div", value === null || value === undefined || value === "" ? "-" : value, "v"));
    c.appendChild(el("div", key, "k"));
    parent.appendChild(c);
  }
  function decision(d) {
    if (!d || !Object.keys(d).length) return "";
    if (!d.retry) return "no retry (" + (d.reason || "") + ")";
    return "retry in " + Number(d.delay_s || 0).toFixed(2) + " s (" + (d.reason || "") + ")";
  }
  const LOG_COLUMNS = [["time", function (l) { return clock(l.ts); }],
    ["task", function (l) { return l.task + "#" + l.attempt; }],
    ["stream", function (l) { return l.stream; }], ["text", function (l) { return l.text; }]];
  function addLogs(row) {
    if (row.log_id <= lastLog) return;  // already shown (a reconnect may resend nothing older)
    lastLog = row.log_id;
    const node = document.getElementById("logs");
    if (!node.firstChild) header(node, LOG_COLUMNS);
    row.lines.forEach(function (line) {
      addRow(node, LOG_COLUMNS, { ts: line.ts, stream: line.stream, text: line.text,
        task: row.task_name, attempt: row.attempt });
    });
    if (row.dropped_lines) document.getElementById("log-state").textContent =
      "(some attempts dropped lines past their limit)";
  }

  function draw(p) {
    const s = document.getElementById("summary");
    clear(s);
    card(s, "pipeline", p.pipeline_id);
    card(s, "key", p.key);
    card(s, "name", p.name);
    card(s, "state", p.state);
    card(s, "tasks", p.n_tasks_done + "/" + p.n_tasks_total);
    card(s, "attempts", p.attempts_total);
    card(s, "run", p.run_id);
    card(s, "duration", p.started_at && p.finished_at ? ms((p.finished_at - p.started_at) * 1000) : "");
    const where = p.last_frame ? p.last_frame.file + ":" + p.last_frame.line + " in " + p.last_frame.function : "";
    document.getElementById("error").textContent = p.error_type ?
      p.failed_task + ": " + p.error_type + " (" + (p.error_class || "") + "): " + (p.error_message || "") +
      (where ? " at " + where : "") : "no error";
    document.getElementById("traceback").textContent = p.traceback || "";
    table("tasks", [["seq", function (t) { return t.seq; }], ["task", function (t) { return t.name; }],
      ["state", function (t) { return t.state; }], ["attempts", function (t) { return t.attempts_used; }],
      ["duration", function (t) { return ms(t.duration_ms); }], ["resource", function (t) { return t.resource; }],
      ["error", function (t) { return t.error_type ? t.error_type + ": " + (t.error_message || "") : ""; }]], p.tasks);
    table("attempts", [["task", function (a) { return a.task_name + " (" + a.seq + ")"; }],
      ["attempt", function (a) { return a.attempt; }], ["outcome", function (a) { return a.outcome; }],
      ["started", function (a) { return clock(a.started_at); }], ["duration", function (a) { return ms(a.duration_ms); }],
      ["decision", function (a) { return decision(a.decision); }],
      ["error", function (a) { return a.error_type ? a.error_type + ": " + short(a.error_message || "", 300) : ""; }],
      ["leases", function (a) { return (a.leases || []).length; }]], p.attempts);
    const leases = [];
    p.attempts.forEach(function (a) {
      (a.leases || []).forEach(function (l) { leases.push({ attempt: a, lease: l }); });
    });
    table("leases", [["task", function (r) { return r.attempt.task_name + "#" + r.attempt.attempt; }],
      ["pool", function (r) { return r.lease.pool; }], ["resource", function (r) { return r.lease.resource_id || r.lease.resource; }],
      ["held", function (r) { return r.lease.held_ms !== undefined ? ms(r.lease.held_ms) : ""; }],
      ["detail", function (r) { return short(r.lease, 200); }]], leases);
    table("handoffs", [["from", function (h) { return h.from_task; }],
      ["to", function (h) { return h.operation === "restart" ? "restart" : (h.to_task === null ? "end" : h.to_task); }],
      ["reason", function (h) { return h.reason; }], ["run", function (h) { return h.run_id; }],
      ["at", function (h) { return clock(h.ts); }]], p.handoffs);
    table("metrics", [["name", function (m) { return m.name; }], ["value", function (m) { return short(m.value, 200); }],
      ["run", function (m) { return m.run_id; }], ["attempt", function (m) { return m.attempt; }]], p.metrics);
    document.getElementById("curves").textContent = p.curve_keys.length ?
      "curves: " + p.curve_keys.join(", ") : "no curves recorded";
    table("artifacts", [["seq", function (a) { return a.seq; }], ["task", function (a) { return a.task_name; }],
      ["type", function (a) { return a.type_name; }], ["codec", function (a) { return a.codec; }],
      ["size", function (a) { return bytes(a.size); }], ["digest", function (a) { return a.digest; }],
      ["final", function (a) { return a.is_final ? "yes" : ""; }],
      ["kept", function (a) { return a.available ? (a.blob_ref ? "blob" : "inline") : "not kept"; }]], p.artifacts);
    clear(document.getElementById("logs"));
    p.logs.forEach(addLogs);
    if (!p.keeps_logs) document.getElementById("log-state").textContent = "(this store keeps no logs)";
  }

  function follow() {
    // the rows after the last one drawn; a reconnect resumes from Last-Event-ID by itself
    const q = new URLSearchParams({ pipeline_id: pid, after: String(lastLog) });
    const source = new EventSource("/logs/stream?" + q.toString());
    source.addEventListener("log", function (ev) {
      try { addLogs(JSON.parse(ev.data)); } catch (err) { document.getElementById("status").textContent = String(err); }
    });
  }

  async function load() {
    const status = document.getElementById("status");
    if (!pid) { status.textContent = "no pipeline_id given"; return; }
    try {
      const r = await fetch("/pipeline?" + new URLSearchParams({ pipeline_id: pid }).toString(),
        { credentials: "same-origin", cache: "no-store" });
      const body = await r.json();
      if (!r.ok) { status.textContent = body.error || ("HTTP " + r.status); return; }
      draw(body);
      status.textContent = "";
      follow();
    } catch (err) {
      status.textContent = String(err);
    }
  }
  document.addEventListener("DOMContentLoaded", load);
})();
