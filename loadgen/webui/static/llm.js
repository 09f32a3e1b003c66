// The LLM tab's live page: polls live.json every 2 s and draws a step table and small SVG charts
// (no libraries, no network beyond live.json). Figures are the report's (loadgen.webui.live); the
// table rounds them as the report's tables do (tok/s: 1 decimal; ms: 2 decimals under 10, else 1).
//
// Element ids and attributes (stable: browser tests query them):
//   #run, #current, #source, #reports a          the run, the current step, "live"/"report", report links
//   #totals [data-count=ok|failed]               the run's requests (summary.json's totals)
//   #steer, #start                               empty mount points for other panels
//   #knee, #knee-text                            the knee verdict
//   #steps-table thead th[data-col]              the columns drawn (optional ones only with figures)
//   #steps-table tbody tr[data-step]             one row per step; data-valid="true|false",
//                                                data-timing="uncertain|ok", data-phase; .badge.valid /
//                                                .badge.invalid / .badge.uncertain (title: the reason);
//                                                tr.why-row[data-why-for=<step>] td.why: the reasons, one div each
//   #pareto svg (#chart-pareto)                  circle[data-step] per step (class on-frontier / off-frontier
//                                                / invalid), polyline.frontier[data-context] per context length
//   #chart-tok, #chart-req, #chart-ttft, #chart-itl   per-step charts
//   #kv-chart svg (#chart-kv)                    KV-cache fill (%); #queue-chart svg (#chart-queue): queue,
//                                                running, preemptions
//   #power-chart svg (#chart-power)              per GPU, dashed line.limit at the per-GPU limit;
//                                                #power-total-chart svg (#chart-power-total): total vs the total limit
//   #errors (#chart-errors, #errors-table tr[data-class] with li.sample per message)
//   #logs (#logs-list li[data-pattern], #log-counts, #logs-empty)
//   #workers (#workers-table tr[data-worker], #chart-workers-cpu, #chart-workers-lag)
//   #tenants (hidden without [[tenants]]): #tenants-table tr[data-step][data-tenant][data-slo=held|broken|none],
//                                                #tenants-fairness
// Every chart svg carries data-points (points drawn); body carries data-steps and data-updated.
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

  function h(tag, attrs, parent, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function has(v) { return v !== null && v !== undefined; }

  // axis labels: short
  function fmt(v) {
    if (!has(v)) return "-";
    const a = Math.abs(v);
    if (Number.isInteger(v) && a < 1e4) return String(v);
    if (a >= 1e4) return (v / 1e3).toFixed(0) + "k";
    if (a >= 100) return v.toFixed(0);
    if (a >= 10) return v.toFixed(1);
    return v.toFixed(2).replace(/\.?0+$/, "") || "0";
  }

  // table figures: the report's rounding (report/markdown.py _num and _ms)
  function num(v, digits) {
    if (!has(v)) return "–";
    const d = digits === undefined ? 1 : digits;
    if (Number.isInteger(v) && digits === undefined) return v.toLocaleString("en-US");
    return v.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d });
  }
  function ms(v) { return has(v) ? num(v, Math.abs(v) < 10 ? 2 : 1) : "–"; }
  function pair(a, b) { return `${ms(a)} / ${ms(b)}`; }
  function pct(v) { return has(v) ? `${(v * 100).toFixed(0)}%` : "–"; }

  function empty(svg, w, h2, message) {
    el("text", { x: w / 2, y: h2 / 2, "text-anchor": "middle", class: "empty" }, svg, message);
    svg.dataset.points = "0";
  }

  function frame(svg) {
    const w = Math.max(svg.clientWidth || 420, 200), h2 = Math.max(svg.clientHeight || 210, 100);
    svg.setAttribute("viewBox", `0 0 ${w} ${h2}`);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    return [w, h2];
  }

  function yAxis(svg, w, Y, yMax) {
    for (let i = 0; i <= 4; i++) {
      const y = (yMax * i) / 4;
      el("line", { x1: PAD.l, x2: w - PAD.r, y1: Y(y), y2: Y(y), class: "grid-line" }, svg);
      el("text", { x: PAD.l - 4, y: Y(y) + 4, "text-anchor": "end" }, svg, fmt(y));
    }
  }

  // series: [{name, points: [[x, y], ...], dash}]; opts: {xLabels (categorical x), xTitle, empty,
  // bars, hlines: [{y, label}], yMax}
  function chart(id, series, opts) {
    const svg = document.getElementById(id);
    if (!svg) return;
    const [w, h2] = frame(svg);
    const pts = series.flatMap((s) => s.points.filter((p) => has(p[1])));
    if (!pts.length) { empty(svg, w, h2, opts.empty || "no data yet"); return; }
    svg.dataset.points = String(pts.length);
    const cat = opts.xLabels;
    let x0 = 0, x1 = 1;
    if (cat) { x0 = -0.5; x1 = cat.length - 0.5; }
    else { x0 = Math.min(...pts.map((p) => p[0])); x1 = Math.max(...pts.map((p) => p[0])); if (x1 <= x0) x1 = x0 + 1; }
    const lines = opts.hlines || [];
    const top = Math.max(...pts.map((p) => p[1]), ...lines.map((l) => l.y));
    const yMax = opts.yMax || niceMax(top * (opts.yPad || 1.05));
    const X = (x) => PAD.l + ((x - x0) / (x1 - x0)) * (w - PAD.l - PAD.r);
    const Y = (y) => h2 - PAD.b - (y / yMax) * (h2 - PAD.t - PAD.b);
    yAxis(svg, w, Y, yMax);
    el("line", { x1: PAD.l, x2: w - PAD.r, y1: Y(0), y2: Y(0), class: "axis" }, svg);
    el("line", { x1: PAD.l, x2: PAD.l, y1: PAD.t - 4, y2: Y(0), class: "axis" }, svg);
    if (cat) {
      const every = Math.max(1, Math.ceil(cat.length / Math.max(1, Math.floor((w - PAD.l) / 46))));
      cat.forEach((c, i) => { if (i % every === 0) el("text", { x: X(i), y: h2 - PAD.b + 14, "text-anchor": "middle" }, svg, c); });
    } else {
      for (let i = 0; i <= 4; i++) {
        const x = x0 + ((x1 - x0) * i) / 4;
        el("text", { x: X(x), y: h2 - PAD.b + 14, "text-anchor": "middle" }, svg, fmt(x) + "s");
      }
    }
    if (opts.xTitle) el("text", { x: w - PAD.r, y: h2 - 2, "text-anchor": "end" }, svg, opts.xTitle);
    lines.forEach((l) => {
      el("line", { x1: PAD.l, x2: w - PAD.r, y1: Y(l.y), y2: Y(l.y), class: "limit" }, svg);
      el("text", { x: w - PAD.r - 2, y: Y(l.y) - 3, "text-anchor": "end", class: "limit-label" }, svg, l.label);
    });
    series.forEach((s, si) => {
      const color = s.color || COLORS[si % COLORS.length];
      const p = s.points.filter((q) => has(q[1]));
      if (opts.bars) {
        const bw = Math.max(4, ((w - PAD.l - PAD.r) / Math.max(1, cat.length)) * 0.6);
        p.forEach((q) => el("rect", { x: X(q[0]) - bw / 2, y: Y(q[1]), width: bw, height: Y(0) - Y(q[1]), fill: color }, svg));
        p.forEach((q) => el("text", { x: X(q[0]), y: Y(q[1]) - 3, "text-anchor": "middle" }, svg, fmt(q[1])));
        return;
      }
      const attrs = { points: p.map((q) => `${X(q[0])},${Y(q[1])}`).join(" "), fill: "none", stroke: color, "stroke-width": 2 };
      if (s.dash) attrs["stroke-dasharray"] = "5 3";
      if (p.length > 1) el("polyline", attrs, svg);
      if (cat || p.length < 60) p.forEach((q) => el("circle", { cx: X(q[0]), cy: Y(q[1]), r: 3, fill: color }, svg));
      if (series.length > 1) {
        const lx = PAD.l + 8 + si * 78;
        el("rect", { x: lx, y: 4, width: 10, height: 10, fill: color }, svg);
        el("text", { x: lx + 14, y: 13 }, svg, s.name);
      }
    });
  }

  // The Pareto chart: x = tok/s per user (1000 / TPOT p50), y = tok/s per GPU, one point per step,
  // the frontier of each context length joined left to right (analysis/pareto.py decides it).
  function pareto(p) {
    const svg = document.getElementById("chart-pareto");
    if (!svg) return;
    const [w, h2] = frame(svg);
    const note = document.getElementById("pareto-note");
    if (note) note.textContent = p && p.gpus ? `(${p.gpus} GPU${p.gpus > 1 ? "s" : ""}, ${p.gpus_source}${p.note ? ": " + p.note : ""})` : "";
    const pts = ((p && p.points) || []).filter((q) => has(q.per_user_tok_s) && has(q.tok_s_per_gpu));
    if (!pts.length) { empty(svg, w, h2, "a point per step once a step has a TPOT and tok/s"); return; }
    svg.dataset.points = String(pts.length);
    const xMax = niceMax(Math.max(...pts.map((q) => q.per_user_tok_s)) * 1.05);
    const yMax = niceMax(Math.max(...pts.map((q) => q.tok_s_per_gpu)) * 1.05);
    const X = (x) => PAD.l + (x / xMax) * (w - PAD.l - PAD.r);
    const Y = (y) => h2 - PAD.b - (y / yMax) * (h2 - PAD.t - PAD.b);
    yAxis(svg, w, Y, yMax);
    for (let i = 0; i <= 4; i++) el("text", { x: X((xMax * i) / 4), y: h2 - PAD.b + 14, "text-anchor": "middle" }, svg, fmt((xMax * i) / 4));
    el("line", { x1: PAD.l, x2: w - PAD.r, y1: Y(0), y2: Y(0), class: "axis" }, svg);
    el("line", { x1: PAD.l, x2: PAD.l, y1: PAD.t - 4, y2: Y(0), class: "axis" }, svg);
    el("text", { x: w - PAD.r, y: h2 - 2, "text-anchor": "end" }, svg, "tok/s per user");
    el("text", { x: PAD.l + 4, y: PAD.t - 6 }, svg, "tok/s per GPU");
    const contexts = [...new Set(pts.map((q) => String(q.context_tokens)))];
    contexts.forEach((ctx, ci) => {
      const front = pts.filter((q) => q.on_frontier && String(q.context_tokens) === ctx).sort((a, b) => a.per_user_tok_s - b.per_user_tok_s);
      if (front.length > 1) {
        el("polyline", { points: front.map((q) => `${X(q.per_user_tok_s)},${Y(q.tok_s_per_gpu)}`).join(" "),
          class: "frontier", "data-context": ctx, fill: "none", stroke: COLORS[ci % COLORS.length], "stroke-width": 2 }, svg);
      }
    });
    pts.forEach((q) => {
      const ci = contexts.indexOf(String(q.context_tokens));
      const cls = !q.valid ? "invalid" : q.on_frontier ? "on-frontier" : "off-frontier";
      const c = el("circle", { cx: X(q.per_user_tok_s), cy: Y(q.tok_s_per_gpu), r: 4, class: cls, "data-step": q.step,
        fill: q.valid ? COLORS[ci % COLORS.length] : "none", stroke: COLORS[ci % COLORS.length] }, svg);
      el("title", {}, c, `step ${q.step} ${loadOf(q)}: ${fmt(q.per_user_tok_s)} tok/s per user, ${fmt(q.tok_s_per_gpu)} tok/s per GPU${q.valid ? "" : " (INVALID)"}`);
      el("text", { x: X(q.per_user_tok_s) + 6, y: Y(q.tok_s_per_gpu) - 5 }, svg, loadOf(q));
    });
  }

  function loadOf(s) {
    let t = has(s.rate) ? `${fmt(s.rate)}/s` : `C=${s.concurrency ?? "?"}`;
    if (s.context_tokens) t += `@${s.context_tokens}`;
    return t;
  }

  function text(id, value) { const e = document.getElementById(id); if (e) e.textContent = value; }

  function badge(parent, cls, label, title) {
    const b = h("span", { class: `badge ${cls}` }, parent, label);
    if (title) b.title = title;
    return b;
  }

  // The step table's columns: [title, tooltip, cell(step) -> [text, class, tooltip?], optional?]. An
  // optional column is drawn only when some step has a figure for it (no GPU source: no power).
  const COLUMNS = [
    ["Step", "", (s) => [`${s.step} · ${loadOf(s)}`, "nw"]],
    ["State", "warm-up (not measured), then VALID or INVALID (why on the row below)", null],
    ["OK / failed", "requests sent in the steady window: the report's counts",
      (s) => [`${num(s.requests_ok)} / ${num(s.requests_failed)}`, "n"]],
    ["tok/s", "aggregate: output tokens that arrived in the steady window / window length", (s) => [num(s.tok_s, 1), "n"]],
    ["tok/s per req", "output tokens / E2E, mean over requests", (s) => [num(s.req_tok_s, 1), "n"]],
    ["TTFT p50 / p99 ms", "", (s) => [pair(s.ttft_p50, s.ttft_p99), "n"]],
    ["TPOT p50 / p99 ms", "", (s) => [pair(s.tpot_p50, s.tpot_p99), "n"]],
    ["ITL p50 / p99 ms", "every gap between chunks", (s) => [pair(s.itl_p50, s.itl_p99), "n"]],
    ["KV", "the server's KV-cache fill, mean over the window", (s) => [pct(s.kv_usage_mean), "n"], (s) => has(s.kv_usage_mean)],
    ["Queue", "requests waiting in the server's queue, mean", (s) => [num(s.queue_len_mean, 1), "n"], (s) => has(s.queue_len_mean)],
    ["Preempt.", "preemptions (retractions) in the window", (s) => [has(s.preemptions) ? num(s.preemptions, 0) : "–", "n"],
      (s) => has(s.preemptions)],
    ["GPU W", "GPU power in total, mean over the window (of the limit)", (s) => [
      has(s.gpu_power_w) ? `${num(s.gpu_power_w, 0)}${has(s.gpu_power_limit_w) ? " of " + num(s.gpu_power_limit_w, 0) : ""}${s.power_valid === false ? " *" : ""}` : "–",
      "n", s.power_valid === false ? `not load power: ${s.power_invalid_reason || "the GPUs were not loaded"}` : ""],
      (s) => has(s.gpu_power_w)],
    ["Client CPU / lag p99", "this load generator's CPU (share of a core) and event-loop lag",
      (s) => [has(s.client_cpu) ? `${pct(s.client_cpu)} / ${ms(s.loop_lag_p99_ms)} ms` : "–", "n"], (s) => has(s.client_cpu)],
  ];

  function stateCell(td, s) {
    if (s.phase === "warm-up") badge(td, "pending", "warm-up", "the step's warm-up: not measured");
    else badge(td, s.valid ? "valid" : "invalid", s.valid ? "VALID" : "INVALID", s.invalid_reason);
    if (s.timing_uncertain) badge(td, "uncertain", "timing uncertain", s.timing_reason);
  }

  function stepsTable(steps) {
    const table = document.getElementById("steps-table");
    const body = table && table.querySelector("tbody");
    if (!body) return;
    const cols = COLUMNS.filter((c) => !c[3] || steps.some(c[3]));
    const head = table.querySelector("thead tr");
    const titles = cols.map((c) => c[0]).join("|");
    if (head.dataset.cols !== titles) {
      head.textContent = "";
      cols.forEach((c) => { const th = h("th", c[1] ? { title: c[1] } : {}, head, c[0]); th.dataset.col = c[0]; });
      head.dataset.cols = titles;
    }
    body.textContent = "";
    text("steps-empty", steps.length ? "" : "no step yet");
    steps.forEach((s) => {
      // a step warming up is not judged yet: no INVALID colour, no reasons
      const judged = s.phase !== "warm-up";
      const tr = h("tr", { "data-step": s.step, "data-valid": judged ? String(s.valid) : "pending", "data-timing": s.timing_uncertain ? "uncertain" : "ok", "data-phase": s.phase }, body);
      cols.forEach((c) => {
        if (c[2] === null) { stateCell(h("td", {}, tr), s); return; }
        const [value, cls, tip] = c[2](s);
        h("td", Object.assign(cls ? { class: cls } : {}, tip ? { title: tip } : {}), tr, value);
      });
      // the reasons get a full-width row of their own under the step's figures
      const why = judged ? [s.invalid_reason, s.timing_reason].filter((r) => r) : [];
      if (why.length) {
        const wr = h("tr", { class: "why-row", "data-why-for": s.step, "data-valid": String(s.valid) }, body);
        const td = h("td", { class: "why", colspan: String(cols.length) }, wr);
        why.forEach((r) => h("div", {}, td, r));
      }
    });
  }

  function errors(d) {
    const counts = d.errors || {};
    const classes = Object.keys(counts);
    chart("chart-errors", [{ name: "errors", points: classes.map((k, i) => [i, counts[k]]) }],
      { xLabels: classes, bars: true, empty: "no errors" });
    const body = document.querySelector("#errors-table tbody");
    if (!body) return;
    body.textContent = "";
    classes.forEach((k) => {
      const tr = h("tr", { "data-class": k }, body);
      h("td", {}, tr, k);
      h("td", { class: "n" }, tr, num(counts[k]));
      const ul = h("ul", {}, h("td", {}, tr));
      ((d.error_samples || {})[k] || []).forEach((m) => h("li", { class: "sample" }, ul, m));
    });
  }

  function logs(d) {
    const list = document.getElementById("logs-list");
    if (!list) return;
    list.textContent = "";
    const items = (d.logs || []).slice().reverse();
    items.forEach((e) => {
      const li = h("li", { "data-pattern": e.pattern, class: `sev-${e.severity || "info"}` }, list);
      h("span", { class: "t" }, li, `${fmt(e.t_s)}s`);
      h("strong", {}, li, ` ${e.pattern} `);
      h("code", {}, li, e.line || "");
    });
    const counts = d.log_counts || {};
    text("log-counts", Object.keys(counts).map((k) => `${k}: ${counts[k]}`).join(", "));
    text("logs-empty", items.length ? "" : "no server log match (scan the server's log with --server-log-file or --server-logs)");
  }

  function workers(d) {
    const ws = d.workers || {};
    const names = Object.keys(ws).sort();
    const body = document.querySelector("#workers-table tbody");
    if (body) {
      body.textContent = "";
      names.forEach((n) => {
        const w = ws[n];
        const tr = h("tr", { "data-worker": n }, body);
        h("td", {}, tr, n);
        h("td", { class: "n" }, tr, pct(w.cpu_frac));
        h("td", { class: "n" }, tr, `${ms(w.loop_lag_ms)} (max ${ms(w.lag_max_ms)})`);
        h("td", { class: "n" }, tr, has(w.in_flight) ? String(w.in_flight) : "–");
        h("td", { class: "n" }, tr, `${num(w.requests_ok)} / ${num(w.requests_failed)}`);
      });
    }
    const none = "no self-measurement yet (client-<worker>.jsonl)";
    chart("chart-workers-cpu", names.map((n) => ({ name: n, points: ws[n].cpu.map((p) => [p[0], p[1] * 100]) })),
      { xTitle: "CPU % of a core, since the run started", empty: none, hlines: names.length ? [{ y: 90, label: "bound (90%)" }] : [] });
    chart("chart-workers-lag", names.map((n) => ({ name: n, points: ws[n].lag_ms })),
      { xTitle: "loop lag (ms), since the run started", empty: none });
  }

  function telemetry(d) {
    const server = d.server_samples;
    const kvEmpty = server ? "the server's metrics carry no KV-cache fill" : "no server metrics yet (give --metrics-url, the server's /metrics)";
    chart("chart-kv", [{ name: "kv", points: (d.kv || []).map((p) => [p[0], p[1] * 100]) }],
      { xTitle: "since the run started", empty: kvEmpty, yMax: 100 });
    chart("chart-queue", [
      { name: "queue", points: d.queue || [] },
      { name: "running", points: d.running || [] },
      { name: "preempted", points: d.preemptions || [], dash: true },
    ], { xTitle: "since the run started", empty: server ? "the server's metrics carry no queue or preemption counts" : "no server metrics yet (give --metrics-url, the server's /metrics)" });
    const gpus = Object.keys(d.power || {});
    const limits = d.power_limit_w || {};
    const perGpuLimit = Math.max(0, ...Object.values(limits));
    const noGpu = "no GPU samples (telemetry off, or no GPU source: --gpu-source)";
    chart("chart-power", gpus.map((g) => ({ name: g, points: d.power[g] })),
      { xTitle: "since the run started", empty: noGpu, hlines: perGpuLimit > 0 ? [{ y: perGpuLimit, label: `limit ${fmt(perGpuLimit)} W` }] : [] });
    text("power-limit", perGpuLimit > 0 ? `(limit ${fmt(perGpuLimit)} W per GPU)` : "");
    const totalLimit = d.power_limit_total_w;
    chart("chart-power-total", [{ name: "total", points: d.power_total || [] }],
      { xTitle: "since the run started", empty: noGpu, hlines: has(totalLimit) ? [{ y: totalLimit, label: `limit ${fmt(totalLimit)} W` }] : [] });
  }

  // a [[tenants]] run: each tenant's figures per step, the limits of its SLO it broke
  function tenantsTable(steps) {
    const panel = document.getElementById("tenants");
    const body = document.querySelector("#tenants-table tbody");
    if (!panel || !body) return;
    const rows = steps.filter((s) => s.tenants);
    panel.hidden = rows.length === 0;
    body.textContent = "";
    rows.forEach((s) => {
      Object.keys(s.tenants).forEach((name) => {
        const t = s.tenants[name];
        const broke = t.slo_breaks && t.slo_breaks.length;
        const judged = t.slo_breaks !== null && (broke || t.ok > 0);  // no SLO, or nothing asked: –
        const tr = h("tr", { "data-step": String(s.step), "data-tenant": name,
          "data-slo": !judged ? "none" : broke ? "broken" : "held" }, body);
        h("td", {}, tr, `${s.step} ${loadOf(s)}`);
        h("td", {}, tr, name);
        h("td", { class: "n" }, tr, has(t.demand) ? fmt(t.demand) : "–");
        h("td", { class: "n" }, tr, `${num(t.ok)} / ${num(t.failed)}`);
        h("td", { class: "n" }, tr, num(t.tok_s, 1));
        h("td", { class: "n" }, tr, pct(t.share));
        h("td", { class: "n" }, tr, `${ms(t.ttft_p50)} / ${ms(t.ttft_p99)}`);
        h("td", { class: "n" }, tr, ms(t.tpot_p99));
        h("td", { class: "n" }, tr, ms(t.e2e_p99));
        h("td", { class: "n" }, tr, pct(t.goodput_frac));
        h("td", { class: broke ? "why" : "" }, tr, !judged ? "–" : broke ? t.slo_breaks.join("; ") : "held");
      });
    });
    const fair = rows.filter((s) => has(s.fairness)).map((s) => `${loadOf(s)} ${s.fairness.toFixed(2)}`);
    text("tenants-fairness", fair.length ? `fairness (Jain's index of goodput per unit of demand): ${fair.join(", ")}` : "");
  }

  function render(d) {
    const steps = d.steps || [];
    const labels = steps.map(loadOf);
    const by = (key) => steps.map((s, i) => [i, s[key]]);
    text("run", d.run_id || "no run yet: start one from the form on the first page");
    text("source", d.run_id ? (d.source === "report" ? "figures from the written report" : "live figures") : "");
    const c = d.current;
    // the current step's figures are its row's (the steady window's), as the table shows them
    text("current", !c ? "-" : c.phase === "warm-up"
      ? `step ${c.step} ${loadOf(c)} warm-up (not measured)`
      : `step ${c.step} ${loadOf(c)} ${c.phase}: ${num(c.requests_ok)} ok, ${num(c.requests_failed)} failed, ${num(c.tok_s, 1)} tok/s`);
    const t = d.totals || {};
    text("total-ok", num(t.requests_ok));
    text("total-failed", num(t.requests_failed));
    text("total-cancelled", t.requests_cancelled ? ` (${num(t.requests_cancelled)} of them cancelled: the run was stopped mid-request)` : "");
    const reports = document.getElementById("reports");
    reports.textContent = "";
    for (const name in d.reports || {}) {
      const a = document.createElement("a");
      a.href = d.reports[name]; a.textContent = name; a.target = "_blank";
      reports.appendChild(a);
    }
    const knee = document.getElementById("knee");
    const k = d.knee;
    knee.className = "knee" + (k ? (has(k.concurrency) || has(k.rate) ? " found" : " none") : "");
    if (k) {
      const at = has(k.concurrency) ? `at concurrency ${k.concurrency}` : has(k.rate) ? `at ${fmt(k.rate)} req/s` : "not reached";
      text("knee-text", `${at}: ${k.reason || ""}`);
    }
    stepsTable(steps);
    tenantsTable(steps);
    pareto(d.pareto);
    chart("chart-tok", [{ name: "tok/s", points: by("tok_s") }], { xLabels: labels });
    chart("chart-req", [{ name: "tok/s", points: by("req_tok_s") }], { xLabels: labels });
    chart("chart-ttft", ["p50", "p90", "p99"].map((p) => ({ name: p, points: by("ttft_" + p) })), { xLabels: labels });
    chart("chart-itl", ["p50", "p90", "p99"].map((p) => ({ name: p, points: by("itl_" + p) })), { xLabels: labels });
    telemetry(d);
    errors(d);
    logs(d);
    workers(d);
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
