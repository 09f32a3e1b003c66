// The LLM tab's live page: polls live.json every 2 s and draws small SVG charts (no libraries).
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#2e86de", "#e67e22", "#c0392b", "#27ae60", "#8e44ad", "#16a085", "#d35400", "#7f8c8d"];
  const PAD = { l: 48, r: 10, t: 18, b: 26 };

  function el(tag, attrs, parent, text) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function fmt(v) {
    if (v === null || v === undefined) return "-";
    const a = Math.abs(v);
    if (a >= 1e4) return (v / 1e3).toFixed(0) + "k";
    if (a >= 100) return v.toFixed(0);
    if (a >= 10) return v.toFixed(1);
    return v.toFixed(2).replace(/\.?0+$/, "") || "0";
  }

  // series: [{name, points: [[x, y], ...]}]; opts: {xLabels: [..] (categorical x), xTitle}
  function chart(id, series, opts) {
    const svg = document.getElementById(id);
    if (!svg) return;
    const w = Math.max(svg.clientWidth || 420, 200), h = Math.max(svg.clientHeight || 210, 120);
    svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const pts = series.flatMap((s) => s.points.filter((p) => p[1] !== null && p[1] !== undefined));
    if (!pts.length) {
      el("text", { x: w / 2, y: h / 2, "text-anchor": "middle", class: "empty" }, svg, opts.empty || "no data yet");
      svg.dataset.points = "0";
      return;
    }
    svg.dataset.points = String(pts.length);
    const cat = opts.xLabels;
    let x0 = 0, x1 = 1;
    if (cat) { x0 = -0.5; x1 = cat.length - 0.5; }
    else { x0 = Math.min(...pts.map((p) => p[0])); x1 = Math.max(...pts.map((p) => p[0])); if (x1 <= x0) x1 = x0 + 1; }
    const yMax = niceMax(Math.max(...pts.map((p) => p[1])) * (opts.yPad || 1.05));
    const X = (x) => PAD.l + ((x - x0) / (x1 - x0)) * (w - PAD.l - PAD.r);
    const Y = (y) => h - PAD.b - (y / yMax) * (h - PAD.t - PAD.b);
    for (let i = 0; i <= 4; i++) {
      const y = (yMax * i) / 4;
      el("line", { x1: PAD.l, x2: w - PAD.r, y1: Y(y), y2: Y(y), class: "grid-line" }, svg);
      el("text", { x: PAD.l - 4, y: Y(y) + 4, "text-anchor": "end" }, svg, fmt(y));
    }
    el("line", { x1: PAD.l, x2: w - PAD.r, y1: Y(0), y2: Y(0), class: "axis" }, svg);
    el("line", { x1: PAD.l, x2: PAD.l, y1: PAD.t - 4, y2: Y(0), class: "axis" }, svg);
    if (cat) {
      const every = Math.max(1, Math.ceil(cat.length / Math.max(1, Math.floor((w - PAD.l) / 46))));
      cat.forEach((c, i) => { if (i % every === 0) el("text", { x: X(i), y: h - PAD.b + 14, "text-anchor": "middle" }, svg, c); });
    } else {
      for (let i = 0; i <= 4; i++) {
        const x = x0 + ((x1 - x0) * i) / 4;
        el("text", { x: X(x), y: h - PAD.b + 14, "text-anchor": "middle" }, svg, fmt(x) + "s");
      }
    }
    if (opts.xTitle) el("text", { x: w - PAD.r, y: h - 2, "text-anchor": "end" }, svg, opts.xTitle);
    series.forEach((s, si) => {
      const color = COLORS[si % COLORS.length];
      const p = s.points.filter((q) => q[1] !== null && q[1] !== undefined);
      if (opts.bars) {
        const bw = Math.max(4, ((w - PAD.l - PAD.r) / Math.max(1, cat.length)) * 0.6);
        p.forEach((q) => el("rect", { x: X(q[0]) - bw / 2, y: Y(q[1]), width: bw, height: Y(0) - Y(q[1]), fill: color }, svg));
        p.forEach((q) => el("text", { x: X(q[0]), y: Y(q[1]) - 3, "text-anchor": "middle" }, svg, fmt(q[1])));
        return;
      }
      if (p.length > 1) el("polyline", { points: p.map((q) => `${X(q[0])},${Y(q[1])}`).join(" "), fill: "none", stroke: color, "stroke-width": 2 }, svg);
      if (cat || p.length < 60) p.forEach((q) => el("circle", { cx: X(q[0]), cy: Y(q[1]), r: 3, fill: color }, svg));
      if (series.length > 1) {
        const lx = PAD.l + 8 + si * 70;
        el("rect", { x: lx, y: 4, width: 10, height: 10, fill: color }, svg);
        el("text", { x: lx + 14, y: 13 }, svg, s.name);
      }
    });
  }

  function stepLabel(s) {
    let t = s.rate !== null && s.rate !== undefined ? `${fmt(s.rate)}/s` : `C=${s.concurrency ?? "?"}`;
    if (s.context_tokens) t += `@${s.context_tokens}`;
    return t;
  }

  function text(id, value) { const e = document.getElementById(id); if (e) e.textContent = value; }

  function render(d) {
    const steps = d.steps || [];
    const labels = steps.map(stepLabel);
    const by = (key) => steps.map((s, i) => [i, s[key]]);
    text("run", d.run_id || "no run yet: start one from Locust's form");
    const c = d.current;
    text("current", c ? `step ${c.step} ${stepLabel(c)} ${c.phase}, ${c.ok} ok, ${c.failed} failed, ${fmt(c.tok_s)} tok/s` : "-");
    const reports = document.getElementById("reports");
    reports.textContent = "";
    for (const name in d.reports || {}) {
      const a = document.createElement("a");
      a.href = d.reports[name]; a.textContent = name; a.target = "_blank";
      reports.appendChild(a);
    }
    const knee = document.getElementById("knee");
    const k = d.knee;
    knee.className = "knee" + (k ? (k.concurrency !== null || k.rate !== null ? " found" : " none") : "");
    if (k) {
      const at = k.concurrency !== null && k.concurrency !== undefined ? `at concurrency ${k.concurrency}` :
        k.rate !== null && k.rate !== undefined ? `at ${fmt(k.rate)} req/s` : "not reached";
      text("knee-text", `${at}: ${k.reason || ""}`);
    }
    chart("chart-tok", [{ name: "tok/s", points: by("tok_s") }], { xLabels: labels });
    chart("chart-req", [{ name: "tok/s", points: by("req_tok_s") }], { xLabels: labels });
    chart("chart-ttft", ["p50", "p90", "p99"].map((p) => ({ name: p, points: by("ttft_" + p) })), { xLabels: labels });
    chart("chart-itl", ["p50", "p90", "p99"].map((p) => ({ name: p, points: by("itl_" + p) })), { xLabels: labels });
    const power = Object.keys(d.power || {}).map((g) => ({ name: g, points: d.power[g] }));
    chart("chart-power", power, { xTitle: "since the run started", empty: "no GPU samples (telemetry off or no GPU source)" });
    chart("chart-kv", [{ name: "kv", points: (d.kv || []).map((p) => [p[0], p[1] * 100]) }],
      { xTitle: "since the run started", empty: "no KV-cache samples (give --metrics-url)" });
    const classes = Object.keys(d.errors || {}).sort();
    chart("chart-errors", [{ name: "errors", points: classes.map((k2, i) => [i, d.errors[k2]]) }],
      { xLabels: classes, bars: true, empty: "no errors" });
    document.body.dataset.updated = String(Date.now());
    document.body.dataset.steps = String(steps.length);
  }

  async function poll() {
    try {
      const r = await fetch("live.json", { cache: "no-store" });
      if (!r.ok) throw new Error(`live.json: HTTP ${r.status}`);
      render(await r.json());
      text("status", `updated ${new Date().toLocaleTimeString()}`);
    } catch (e) {
      text("status", `could not update: ${e.message}`);
    }
    setTimeout(poll, 2000);
  }
  poll();
})();
