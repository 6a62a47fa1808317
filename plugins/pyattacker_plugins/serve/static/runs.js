"use strict";
// The runs page (/runs.html) and the compare page (/compare.html): every node is built with
// createElement/textContent, so text read from the store (labels, notes) stays text.
(function () {
  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  async function get(path, q) {
    const r = await fetch(path + "?" + new URLSearchParams(q || {}).toString(),
      { credentials: "same-origin", cache: "no-store" });
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || path + ": HTTP " + r.status);
    return body;
  }
  function when(ts) { return ts ? new Date(ts * 1000).toISOString().replace("T", " ").slice(0, 19) : "-"; }
  function seconds(v) {
    if (v === null || v === undefined) return "-";
    if (v < 60) return v.toFixed(1) + " s";
    const m = Math.floor(v / 60), h = Math.floor(m / 60);
    return h ? h + "h " + (m % 60) + "m" : m + "m " + Math.round(v % 60) + "s";
  }
  function number(v) {
    if (v === null || v === undefined) return "-";
    if (typeof v !== "number") return String(v);
    return Number.isInteger(v) ? v.toLocaleString("en") : v.toPrecision(6).replace(/\.?0+$/, "");
  }
  function head(table, columns) {
    const tr = el("tr");
    columns.forEach(function (c) { tr.appendChild(el("th", c)); });
    table.appendChild(tr);
  }
  function row(table, cells) {
    const tr = el("tr");
    cells.forEach(function (c) {
      const td = el("td");
      if (c instanceof Node) td.appendChild(c); else td.textContent = c === null || c === undefined ? "-" : String(c);
      tr.appendChild(td);
    });
    table.appendChild(tr);
    return tr;
  }
  function counts(p) {
    const parts = Object.keys(p.by_state).map(function (s) { return s + " " + p.by_state[s]; });
    return p.total + (parts.length ? " (" + parts.join(", ") + ")" : "");
  }
  function radio(name, value, checked) {
    const input = el("input");
    input.type = "radio"; input.name = name; input.value = value; input.checked = checked;
    return input;
  }

  async function runsPage() {
    const doc = await get("/runs");
    document.getElementById("store").textContent = "store " + doc.store + ": " + doc.runs.length + " run(s)";
    const table = document.getElementById("runs");
    clear(table);
    head(table, ["A", "B", "run", "label", "status", "started", "duration", "pipelines", "notes"]);
    const n = doc.runs.length;
    doc.runs.forEach(function (r, i) {
      const link = el("a", r.run_id);
      link.href = "/?run_id=" + encodeURIComponent(r.run_id);
      const notes = r.notes ? r.notes + " (rev " + r.notes_revision + ")" : "";
      const tr = row(table, [radio("a", r.run_id, i === n - 2 || n === 1), radio("b", r.run_id, i === n - 1),
        link, r.label, r.status, when(r.started_at), seconds(r.duration_s), counts(r.pipelines), notes]);
      tr.className = "run";
    });
    document.getElementById("pick").addEventListener("submit", function (ev) {
      ev.preventDefault();
      const form = new FormData(ev.target);
      window.location.href = "/compare.html?" + new URLSearchParams({ a: form.get("a"), b: form.get("b") }).toString();
    });
  }

  async function comparePage() {
    const q = new URLSearchParams(window.location.search);
    const doc = await get("/compare", { a: q.get("a") || "", b: q.get("b") || "" });
    const sides = document.getElementById("sides");
    clear(sides);
    head(sides, ["", "run", "label", "status", "started", "duration", "store"]);
    ["a", "b"].forEach(function (k) {
      const s = doc[k];
      row(sides, [k.toUpperCase(), s.run_id, s.label, s.status, when(s.started_at), seconds(s.duration_s), s.store]);
    });
    const notes = document.getElementById("notes");
    clear(notes);
    ["a", "b"].forEach(function (k) {
      const s = doc[k];
      const fig = el("figure");
      fig.appendChild(el("figcaption", k.toUpperCase() + (s.notes_revision ? " (revision " + s.notes_revision + ")" : "")));
      fig.appendChild(el("pre", s.notes || "no notes", "note-text"));
      notes.appendChild(fig);
    });
    const config = document.getElementById("config");
    clear(config);
    head(config, ["field", "A", "B"]);
    doc.config_changes.forEach(function (c) {
      row(config, [c.key, JSON.stringify(c.a), JSON.stringify(c.b)]);
    });
    if (!doc.config_changes.length) row(config, ["the same", "", ""]);
    document.getElementById("identities").textContent = "task identities: " +
      (doc.same_identities ? "the same" : "different (the chains or their tasks changed)");
    const numbers = document.getElementById("numbers");
    clear(numbers);
    head(numbers, ["", "A", "B", "B - A"]);
    doc.rows.forEach(function (r) {
      const tr = row(numbers, [r.name, number(r.a), number(r.b), r.delta === null ? "-" : (r.delta > 0 ? "+" : "") + number(r.delta)]);
      if (r.delta) tr.className = r.delta > 0 ? "up" : "down";
    });
  }

  const page = document.body.getAttribute("data-page");
  const status = document.getElementById("status");
  (page === "compare" ? comparePage() : runsPage()).then(function () {
    status.textContent = "";
  }, function (err) {
    status.textContent = "error: " + err.message;
    status.className = "failed";
  });
})();
