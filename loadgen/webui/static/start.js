// Added to Locust's index page: the start form of an LLM capacity test, visible on the first page.
//
// Locust's own form keeps our options under a collapsed "Custom parameters" and has no open loop.
// This script draws ours from /loadgen/form.json (the flag table's form fields, their defaults as
// `loadgen ramp` has them, the scenarios the UI offers) above Locust's form, which it folds away
// behind a link, and posts it to Locust's /swarm with the lg_* field names Locust's form uses, so
// the locustfile checks and builds the run exactly as for Locust's form. On success the page goes to
// the LLM tab. Locust's page is React: our panel is inserted as a sibling of Locust's form and put
// back when React redraws.
//
// Element ids (browser tests use them): #lg-start (the panel), #lg-mode-closed / #lg-mode-open /
// #lg-mode-trace (the load mode; trace: a trace scenario's time scales are the steps), #lg-field-<lg name> (each field, e.g. #lg-field-lg_steps), #lg-scenario-info,
// #lg-start-button, #lg-start-message, #lg-locust-form-toggle.
"use strict";
(function () {
  const ID = "lg-start";
  const script = document.currentScript;
  const base = script ? script.src.replace(/loadgen\/static\/start\.js.*$/, "") : "./";
  let schema = null;
  let loading = false;
  let showLocustForm = false;
  const values = {}; // what the user typed, kept across React redraws
  let mode = null;

  const CSS = `
  #lg-start { max-width: 1100px; margin: 16px auto 8px; padding: 16px 20px; border: 1px solid #c8d3c0;
    border-radius: 8px; background: #fbfdf8; font: 14px/1.4 system-ui, sans-serif; color: #1d2a14; }
  #lg-start h2 { margin: 0 0 4px; font-size: 20px; }
  #lg-start .lg-sub { margin: 0 0 12px; color: #56624d; }
  #lg-start fieldset { border: 1px solid #dde5d6; border-radius: 6px; margin: 0 0 12px; padding: 8px 12px 4px; }
  #lg-start legend { font-weight: 600; padding: 0 4px; }
  #lg-start .lg-grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(250px, 1fr)); gap: 8px 16px; }
  #lg-start label { display: block; font-size: 12px; color: #3d4a33; }
  #lg-start input, #lg-start select { width: 100%; box-sizing: border-box; padding: 6px 8px; margin: 2px 0 6px;
    border: 1px solid #b9c6ae; border-radius: 4px; font: inherit; background: #fff; }
  #lg-start input:disabled { background: #eef2ea; color: #8a9481; }
  #lg-start .lg-help { font-size: 11px; color: #6b7762; margin: -4px 0 6px; overflow-wrap: anywhere; }
  #lg-start .lg-field { min-width: 0; }
  #lg-start input[aria-invalid="true"] { border-color: #b42318; box-shadow: 0 0 0 1px #b42318; }
  #lg-start .lg-modes { display: flex; gap: 18px; margin: 0 0 8px; }
  #lg-start .lg-modes label { display: inline; font-size: 14px; color: inherit; }
  #lg-start .lg-modes input { width: auto; margin-right: 4px; }
  #lg-start button { background: #15803d; color: #fff; border: 0; border-radius: 4px; padding: 10px 28px;
    font: 600 15px system-ui, sans-serif; cursor: pointer; }
  #lg-start button:disabled { background: #8fb59c; cursor: wait; }
  #lg-start .lg-msg { margin-left: 12px; }
  #lg-start .lg-actions { position: sticky; bottom: 0; z-index: 2; display: flex; align-items: center;
    margin: 0 -20px; padding: 10px 20px; background: #fbfdf8; border-top: 1px solid #dde5d6; }
  #lg-start .lg-msg.err { color: #b42318; }
  #lg-start .lg-info { font-size: 12px; color: #3d4a33; margin: -2px 0 8px; }
  #lg-start a { color: #15803d; }
  `;

  function el(tag, attrs, children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else if (v !== null && v !== undefined && v !== false) e.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children || []) if (c) e.appendChild(c);
    return e;
  }

  function locustForm() {
    const input = document.querySelector('input[name="userCount"], input[name="user_count"]');
    return input ? input.closest("form") : null;
  }

  function fieldByDest(dest) {
    for (const s of schema.sections) for (const f of s.fields) if (f.dest === dest) return f;
    return null;
  }

  function value(name) {
    const input = document.getElementById("lg-field-" + name);
    return input ? input.value.trim() : "";
  }

  function setValue(name, v) {
    const input = document.getElementById("lg-field-" + name);
    if (input) { input.value = v; values[name] = v; }
  }

  function scenarioByPath(path) {
    return (schema.scenarios || []).find((s) => s.path === path) || null;
  }

  function describeLoad(load) {
    if (!load) return "";
    if (load.mode === "closed") return `closed loop, users ${load.concurrency.join(", ")}`;
    if (load.arrival === "trace") return `open loop, trace replay at time scales ${load.time_scales.join(", ")}`;
    const kind = load.arrival === "gamma" ? `gamma (CV ${load.burstiness})` : "Poisson";
    return `open loop, ${kind} arrivals at ${load.rates.join(", ")} req/s`;
  }

  function applyMode() {
    const closed = mode === "closed", open = mode === "open";
    const trace = document.getElementById("lg-mode-trace");
    if (trace) trace.disabled = !traceScenario();
    for (const [dest, on] of [["concurrency", closed], ["rates", open], ["arrival", open], ["burstiness", open]]) {
      const f = fieldByDest(dest);
      const input = f && document.getElementById("lg-field-" + f.name);
      if (input) input.disabled = !on;
    }
  }

  function showScenario() {
    const f = fieldByDest("scenario");
    const info = document.getElementById("lg-scenario-info");
    const s = f ? scenarioByPath(value(f.name)) : null;
    if (info) info.textContent = s ? `${s.description ? s.description + " · " : ""}${describeLoad(s.load)}` : "prompts from the fields below";
    return s;
  }

  function traceScenario() {
    const f = fieldByDest("scenario");
    const s = f ? scenarioByPath(value(f.name)) : null;
    return !!(s && s.load && s.load.mode === "open" && s.load.arrival === "trace");
  }

  // the load fields a scenario filled, with what they held before: "(none)" puts them back
  let beforeScenario = null;

  function defaultMode() {
    const steps = fieldByDest("concurrency"), rates = fieldByDest("rates");
    return (steps && steps.default) || !rates || !rates.default ? "closed" : "open";
  }

  function fillFromScenario(dest, v) {
    const f = fieldByDest(dest);
    if (!f) return;
    if (beforeScenario === null) beforeScenario = { mode, fields: {} };
    if (!(f.name in beforeScenario.fields)) beforeScenario.fields[f.name] = value(f.name);
    setValue(f.name, v);
  }

  function onScenario() {
    const s = showScenario();
    if (!s || !s.load) {
      // back to no scenario (or one without a load pattern): the load fields the last scenario filled
      // hold again what they held before it (the defaults, unless the user had typed something)
      if (beforeScenario !== null) {
        for (const name in beforeScenario.fields) setValue(name, beforeScenario.fields[name]);
        mode = beforeScenario.mode;
        beforeScenario = null;
      }
      if (mode === "trace" && !traceScenario()) mode = defaultMode();
      document.getElementById("lg-mode-" + mode).checked = true;
      applyMode();
      return;
    }
    if (beforeScenario === null) beforeScenario = { mode, fields: {} };
    // the scenario's [load] fills the load fields, as `loadgen ramp --scenario` does (still editable)
    if (s.load.mode === "closed") {
      mode = "closed";
      fillFromScenario("concurrency", s.load.concurrency.join(","));
    } else if (s.load.arrival === "trace") {
      mode = "trace"; // the steps are the scenario's time scales
    } else {
      mode = "open";
      if (s.load.rates && s.load.rates.length) fillFromScenario("rates", s.load.rates.join(","));
      if (s.load.arrival !== "trace") fillFromScenario("arrival", s.load.arrival);
    }
    fillFromScenario("step_seconds", String(s.load.step_seconds));
    fillFromScenario("warmup_seconds", String(s.load.warmup_seconds));
    document.getElementById("lg-mode-" + mode).checked = true;
    applyMode();
  }

  function field(f) {
    const id = "lg-field-" + f.name;
    const current = values[f.name] !== undefined ? values[f.name] : f.default;
    let input;
    if (f.dest === "scenario") {
      const options = [el("option", { value: "", text: "(none: prompts from the fields)" })];
      for (const s of schema.scenarios || []) {
        options.push(el("option", { value: s.path, disabled: !!s.error, title: s.error || s.description,
          text: s.error ? `${s.name} (not a scenario: ${s.error.slice(0, 80)})` : s.name }));
      }
      input = el("select", { id, name: f.name, onchange: () => { values[f.name] = input.value; onScenario(); } }, options);
    } else if (f.kind === "choice") {
      const options = [];
      if (f.dest === "arrival" || f.dest === "call_type") options.push(el("option", { value: "", text: "(scenario's / default)" }));
      for (const c of f.choices) options.push(el("option", { value: c, text: c }));
      input = el("select", { id, name: f.name, onchange: () => { values[f.name] = input.value; } }, options);
    } else {
      input = el("input", { id, name: f.name, type: "text", placeholder: f.placeholder || "",
        oninput: () => { values[f.name] = input.value; input.removeAttribute("aria-invalid"); } });
    }
    input.value = current;
    // the flag behind a field is for the command line (loadgen ramp); the form speaks of its labels
    return el("div", { class: "lg-field" }, [
      el("label", { for: id, text: f.label, title: `loadgen ramp ${f.flag}` }),
      input,
      el("div", { class: "lg-help", text: f.help }),
    ]);
  }

  function build() {
    if (!document.getElementById("lg-start-css")) document.head.appendChild(el("style", { id: "lg-start-css", text: CSS }));
    const steps = fieldByDest("concurrency");
    if (mode === null) mode = defaultMode();
    const modeBox = el("div", { class: "lg-modes" }, [
      el("label", {}, [el("input", { type: "radio", name: "lg-mode", id: "lg-mode-closed", value: "closed",
        checked: mode === "closed", onchange: () => { mode = "closed"; applyMode(); } }), document.createTextNode("Closed loop: users per step")]),
      el("label", {}, [el("input", { type: "radio", name: "lg-mode", id: "lg-mode-open", value: "open",
        checked: mode === "open", onchange: () => { mode = "open"; applyMode(); } }), document.createTextNode("Open loop: request rates")]),
      el("label", {}, [el("input", { type: "radio", name: "lg-mode", id: "lg-mode-trace", value: "trace",
        checked: mode === "trace", onchange: () => { mode = "trace"; applyMode(); } }),
        document.createTextNode("Trace replay (a trace scenario's time scales)")]),
    ]);
    const hostInput = el("input", { id: "lg-field-host", name: "host", type: "text",
      oninput: () => { values.host = hostInput.value; } });
    hostInput.value = values.host !== undefined ? values.host : schema.host;
    const sets = [el("fieldset", {}, [el("legend", { text: "Server" }), el("div", { class: "lg-grid" }, [
      el("div", {}, [el("label", { for: "lg-field-host", text: "Host (the server's base URL)" }), hostInput])])])];
    for (const s of schema.sections) {
      const grid = el("div", { class: "lg-grid" }, s.fields.map(field));
      const children = [el("legend", { text: s.title })];
      if (s.title === "Load") children.push(modeBox);
      children.push(grid);
      if (s.title === "Requests") children.push(el("div", { id: "lg-scenario-info", class: "lg-info" }));
      sets.push(el("fieldset", {}, children));
    }
    const folders = (schema.scenario_folders || []).join(", ");
    const panel = el("div", { id: ID }, [
      el("h2", { text: "LLM capacity test" }),
      el("p", { class: "lg-sub", text: `Each step runs at one load: a warm-up, then a measured window; the report finds where the server saturates. Scenarios from: ${folders || "none"}. ` }, [
        el("a", { href: base + "loadgen/runs", text: "Past runs" })]),
      ...sets,
      // Start and its answer stay in sight at the bottom of the window however long the form is
      el("div", { class: "lg-actions" }, [
        el("button", { id: "lg-start-button", type: "button", onclick: start, text: "Start" }),
        el("span", { id: "lg-start-message", class: "lg-msg", role: "status" }),
      ]),
      el("p", { class: "lg-sub" }, [el("a", { id: "lg-locust-form-toggle", href: "#", onclick: (e) => {
        e.preventDefault(); showLocustForm = !showLocustForm; sync(true);
      }, text: "Locust's own form (its user count drives the load, no ramp)" })]),
    ]);
    return panel;
  }

  function message(text, error) {
    const m = document.getElementById("lg-start-message");
    if (m) { m.textContent = text; m.className = "lg-msg" + (error ? " err" : ""); }
  }

  async function start() {
    const button = document.getElementById("lg-start-button");
    const data = new FormData();
    for (const s of schema.sections) for (const f of s.fields) data.append(f.name, value(f.name));
    const steps = fieldByDest("concurrency"), rates = fieldByDest("rates");
    if (mode === "closed") {
      if (rates) data.set(rates.name, "");
      if (!value(steps.name)) return message("give the users per step, e.g. 1,8,32", true);
    } else if (mode === "trace") {
      data.set(steps.name, "");
      if (rates) data.set(rates.name, "");
      if (!traceScenario()) return message("choose a trace scenario: its time scales are the steps", true);
    } else {
      data.set(steps.name, "");
      if (!rates || !value(rates.name)) return message("give the request rates per step, e.g. 1,2,4", true);
    }
    const users = mode === "closed" ? Math.max(...value(steps.name).split(",").map(Number).filter((n) => n > 0), 1) : 1;
    data.append("user_count", String(users));
    data.append("spawn_rate", String(Math.max(users, 1)));
    data.append("host", value("host"));
    button.disabled = true;
    message("starting…", false);
    try {
      const r = await fetch(base + "swarm", { method: "POST", body: data, credentials: "same-origin" });
      const answer = await r.json();
      if (!answer.success) {
        const text = answer.message || "the UI refused the start";
        message(text, true);
        // the fields the message names (by their labels) are marked for the user
        let first = null;
        for (const sec of schema.sections) for (const f of sec.fields) {
          const input = document.getElementById("lg-field-" + f.name);
          if (input && text.includes(`\u201c${f.label}\u201d`)) {
            input.setAttribute("aria-invalid", "true");
            first = first || input;
          }
        }
        if (first) { first.scrollIntoView({ block: "center" }); first.focus(); }
        return;
      }
      message(answer.message || "started", false);
      // Locust's page takes the runner's state when it loads: reload into the LLM tab once it runs
      for (let i = 0; i < 40; i++) {
        const s = await (await fetch(base + "stats/requests", { credentials: "same-origin", cache: "no-store" })).json();
        if (s.state && s.state !== "ready" && s.state !== "stopped") break;
        await new Promise((r) => setTimeout(r, 250));
      }
      window.location.href = base + "?tab=llm";
    } catch (e) {
      message("could not reach the UI: " + e, true);
    } finally {
      button.disabled = false;
    }
  }

  async function load() {
    if (loading) return;
    loading = true;
    try {
      const r = await fetch(base + "loadgen/form.json", { credentials: "same-origin", cache: "no-store" });
      if (r.ok) schema = await r.json();
    } finally {
      loading = false;
    }
  }

  function sync(force) {
    const form = locustForm();
    let panel = document.getElementById(ID);
    if (!form) { if (panel) panel.remove(); return; }
    if (!schema) { load().then(() => sync()); return; }
    form.style.display = showLocustForm ? "" : "none";
    if (panel && force) { panel.remove(); panel = null; }
    if (!panel) {
      panel = build();
      form.parentElement.insertBefore(panel, form);
      applyMode();
      showScenario();
    }
  }

  setInterval(sync, 500);
  sync();
})();
