"use strict";
// Numbers as people read them, and the dashboard's charts drawn with the vendored uPlot
// (static/vendor/uplot, MIT). uPlot draws on a canvas and sets styles through the CSSOM,
// which the server's CSP (style-src 'self') allows; labels reach it as plain strings.
window.PyaCharts = (function () {
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"];
  const GROUP = new Intl.NumberFormat("en-US");

  function finite(v) { return typeof v === "number" && isFinite(v); }
  // a count with thousands separators: 1,234,567
  function count(v) { return finite(v) ? GROUP.format(v) : (v === null || v === undefined ? "-" : String(v)); }
  // three significant digits at most, and no trailing zeros: 0.123, 12.3, 1,234
  function number(v) {
    if (!finite(v)) return v === null || v === undefined ? "-" : String(v);
    if (Number.isInteger(v) || Math.abs(v) >= 1000) return GROUP.format(Math.round(v));
    return String(Number(v.toPrecision(3)));
  }
  // a duration given in milliseconds: 840 ms, 62.4 s, 12m 30s, 1h 02m
  function ms(v) {
    if (!finite(v)) return "-";
    if (Math.abs(v) < 1) return number(v) + " ms";
    if (Math.abs(v) < 1000) return String(Math.round(v)) + " ms";
    return seconds(v / 1000);
  }
  function seconds(v) {
    if (!finite(v)) return "-";
    if (Math.abs(v) < 1) return ms(v * 1000);
    if (Math.abs(v) < 100) return (Math.abs(v) < 10 ? v.toFixed(2) : v.toFixed(1)).replace(/\.?0+$/, "") + " s";
    const total = Math.round(v), h = Math.floor(total / 3600), m = Math.floor((total % 3600) / 60);
    const s = total % 60, two = function (n) { return (n < 10 ? "0" : "") + n; };
    return h ? h + "h " + two(m) + "m" : m + "m " + two(s) + "s";
  }
  function percent(v) { return finite(v) ? number(v * 100) + " %" : "-"; }

  function width(node) { return Math.max(280, Math.floor(node.clientWidth || 420)); }

  // one chart per node: redrawn in place when only the data changes, rebuilt otherwise
  function draw(node, key, opts, data) {
    const old = node.pyaChart;
    if (old && node.pyaKey === key) { old.setData(data); return old; }
    if (old) old.destroy();
    while (node.firstChild) node.removeChild(node.firstChild);
    node.pyaChart = new window.uPlot(opts, data, node);
    node.pyaKey = key;
    return node.pyaChart;
  }
  // ``gaps``: an empty bucket breaks the line (a rate is 0 there, a percentile is unknown)
  function series(names, units, joined) {
    return [{}].concat(names.map(function (name, i) {
      return { label: name, stroke: COLORS[i % COLORS.length], width: 1.5, scale: units[i] || "y",
        spanGaps: !!joined, points: { size: 4 }, value: function (u, v) { return v === null || v === undefined ? "-" : fmtOf(units[i])(v); } };
    }));
  }
  function fmtOf(unit) { return unit === "ms" ? ms : (unit === "%" ? percent : number); }
  function axis(unit, side) {
    return { scale: unit, side: side || 3, size: 76, values: function (u, ticks) { return ticks.map(fmtOf(unit)); } };
  }

  // time on the x axis (epoch seconds); ``units`` names each series' scale: "y", "ms" or "%"
  function time(node, names, units, xs, ys, height) {
    const scales = { x: { time: true } };
    const axes = [{}];
    const used = units.filter(function (u, i) { return units.indexOf(u) === i; });
    used.forEach(function (u, i) {
      scales[u] = u === "%" ? { range: [0, 1] } : { range: function (_u, lo, hi) { return [0, Math.max(hi, 1e-9)]; } };
      axes.push(axis(u, i === 0 ? 3 : 1));
    });
    // percentiles join across empty buckets (a line, not scattered points); rates do not
    const joined = units.every(function (u) { return u === "ms"; });
    const opts = { width: width(node), height: height || 180, series: series(names, units, joined), scales: scales,
      axes: axes, cursor: { drag: { x: false, y: false } } };
    return draw(node, "time:" + names.join("|") + units.join("|"), opts, [xs].concat(ys));
  }
  // steps on the x axis (a metric curve)
  function steps(node, names, xs, ys, height) {
    const units = names.map(function () { return "y"; });
    const opts = { width: width(node), height: height || 180, series: series(names, units),
      scales: { x: { time: false } }, axes: [{}, axis("y")] };
    return draw(node, "steps:" + names.join("|"), opts, [xs].concat(ys));
  }
  return { count: count, number: number, ms: ms, seconds: seconds, percent: percent, time: time, steps: steps };
})();
