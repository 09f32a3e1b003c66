// The past-runs page: /loadgen/runs.json as a table (each row a run directory under the UI's output
// folder, its verdict as the report wrote it), and "Compare selected" -> POST /loadgen/compare, which
// writes loadgen compare's page and answers its link. Rows: #runs tbody tr[data-run=<id>]; checkbox
// input.pick; the comparison link #compare-link.
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
      td.colSpan = 10;
      tr.appendChild(td);
      tbody.appendChild(tr);
    }
    for (const r of data.runs) {
      const tr = document.createElement("tr");
      tr.dataset.run = r.id;
      const pick = document.createElement("input");
      pick.type = "checkbox";
      pick.className = "pick";
      pick.value = r.id;
      pick.disabled = r.status !== "reported";
      pick.addEventListener("change", () => { button.disabled = picked().length < 2; });
      const c0 = document.createElement("td");
      c0.appendChild(pick);
      tr.appendChild(c0);
      const name = document.createElement("td");
      if (r.files.includes("report.html")) name.appendChild(link(`runs/${encodeURIComponent(r.id)}/report.html`, r.id));
      else if (r.files.includes("compare.html")) name.appendChild(link(`runs/${encodeURIComponent(r.id)}/compare.html`, r.id));
      else name.textContent = r.id;
      tr.appendChild(name);
      tr.appendChild(cell(r.label));
      tr.appendChild(cell(r.created));
      tr.appendChild(cell(r.status + (r.hint ? ` (${r.hint})` : ""), r.status === "reported" ? "" : "muted"));
      const v = r.verdict;
      tr.appendChild(cell(v ? `${v.steps} (${v.valid_steps})` : "", "num"));
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
        headers: { "Content-Type": "application/json" }, body: JSON.stringify({ runs: picked() }) });
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
