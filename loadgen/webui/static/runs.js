// The past-runs page: /loadgen/runs.json as a table (each row a run directory under the UI's output
// folder, its verdict as the report wrote it), and "Compare selected" -> POST /loadgen/compare, which
// writes loadgen compare's page and answers its link; comparisons stay listed as rows of their own
// (tr[data-kind=comparison]). Rows: #runs tbody tr[data-run=<id>]; checkbox input.pick (disabled, with
// the reason as its title, until the run's report is written); td.counts[data-ok][data-failed]: the
// run's requests (summary.json's totals); the comparison link #compare-link.
"use strict";
(function () {
  const tbody = document.querySelector("#runs tbody");
  const button = document.getElementById("compare");
  const msg = document.getElementById("message");

  function cell(text, cls) {
    const td = document.createElement("td");
    td.textContent = text === null || text === undefined ? "" : String(text);
    if (cls) td.className = cls;
    return td;
  }

  function link(href, text) {
    const a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    return a;
  }

  function picked() {
    return Array.from(document.querySelectorAll("input.pick:checked")).map((c) => c.value);
  }

  function render(data) {
    document.getElementById("out").textContent = data.out;
    tbody.textContent = "";
    if (!data.runs.length) {
      const tr = document.createElement("tr");
      const td = cell("no run directories yet: start a run from the UI", "muted");
      td.colSpan = 11;
      tr.appendChild(td);
      tbody.appendChild(tr);
    }
    for (const r of data.runs) {
      const tr = document.createElement("tr");
      tr.dataset.run = r.id;
      tr.dataset.kind = r.kind || "";
      const pick = document.createElement("input");
      pick.type = "checkbox";
      pick.className = "pick";
      pick.value = r.id;
      pick.disabled = r.status !== "reported";
      if (pick.disabled && r.why_not) pick.title = r.why_not;
      pick.setAttribute("aria-label", pick.disabled ? `${r.id}: ${r.why_not}` : `compare ${r.id}`);
      pick.addEventListener("change", () => { button.disabled = picked().length < 2; });
      const c0 = document.createElement("td");
      if (r.kind !== "comparison") c0.appendChild(pick); // a comparison is not compared again
      tr.appendChild(c0);
      const name = document.createElement("td");
      if (r.files.includes("report.html")) name.appendChild(link(`runs/${encodeURIComponent(r.id)}/report.html`, r.id));
      else if (r.files.includes("compare.html")) name.appendChild(link(`runs/${encodeURIComponent(r.id)}/compare.html`, r.id));
      else name.textContent = r.id;
      tr.appendChild(name);
      tr.appendChild(cell(r.label));
      const created = cell(r.created ? r.created.replace("T", " ").slice(0, 16) : "", "nw");
      created.title = r.created || "";
      tr.appendChild(created);
      tr.appendChild(cell(r.status + (r.hint ? ` (${r.hint})` : ""), r.status === "reported" ? "" : "muted"));
      const v = r.verdict;
      tr.appendChild(cell(v ? `${v.steps} (${v.valid_steps})` : "", "num"));
      // the run's requests as its summary.json totals count them (the report's cards, the live page)
      const n = r.counts;
      const counts = cell(n ? `${n.requests_ok.toLocaleString("en-US")} / ${n.requests_failed.toLocaleString("en-US")}` : "", "num");
      if (n) {
        counts.dataset.ok = String(n.requests_ok);
        counts.dataset.failed = String(n.requests_failed);
        if (n.requests_cancelled) counts.title = `${n.requests_cancelled} of the failed were cancelled (the run was stopped mid-request)`;
      }
      counts.className = "num counts";
      tr.appendChild(counts);
      tr.appendChild(cell(v && v.peak_tok_s !== null ? Math.round(v.peak_tok_s).toLocaleString("en-US") : "", "num"));
      const knee = v ? (v.knee !== null && v.knee !== undefined ? `knee at ${v.axis === "rate" ? "rate " : "C="}${v.knee}: ` : "") + v.text : "";
      tr.appendChild(cell(knee));
      const t = v && v.thresholds;
      tr.appendChild(cell(t ? `${t.verdict}${t.breached ? ` (${t.breached} breached)` : ""}${t.aborted_by ? `, aborted by ${t.aborted_by}` : ""}` : "", t ? t.verdict : ""));
      const files = document.createElement("td");
      for (const f of r.files) {
        files.appendChild(link(`runs/${encodeURIComponent(r.id)}/${f}`, f));
        files.appendChild(document.createTextNode(" "));
      }
      tr.appendChild(files);
      tbody.appendChild(tr);
    }
  }

  async function refresh() {
    const keep = new Set(picked());
    const r = await fetch("runs.json", { cache: "no-store", credentials: "same-origin" });
    if (!r.ok) { msg.textContent = `could not list runs: HTTP ${r.status}`; msg.className = "err"; return; }
    render(await r.json());
    for (const c of document.querySelectorAll("input.pick")) c.checked = keep.has(c.value) && !c.disabled;
    button.disabled = picked().length < 2;
  }

  button.addEventListener("click", async () => {
    button.disabled = true;
    msg.className = "";
    msg.textContent = "comparing…";
    try {
      const r = await fetch("compare", { method: "POST", credentials: "same-origin",
        headers: { "Content-Type": "application/json" }, body: JSON.stringify({ runs: picked().reverse() }) }); // oldest first: the baseline
      const answer = await r.json();
      if (!answer.ok) { msg.textContent = answer.message; msg.className = "err"; return; }
      msg.textContent = "";
      const a = link(answer.url, `comparison ${answer.id}`);
      a.id = "compare-link";
      msg.appendChild(a);
      await refresh();
    } finally {
      button.disabled = picked().length < 2;
    }
  });

  refresh();
  setInterval(refresh, 5000);
})();
