// The Steer panel: hold, release, skip, add a step, set the load of a running ramp.
// window.loadgenSteer(container, basePath) renders it into `container` and talks to
// `${basePath}/loadgen/control/*` (loadgen/webui/control.py) on this page's origin only; basePath is
// Locust's --web-base-path ("" without one). It polls the state every 2 s; each button posts one
// request naming the step it was pressed for, so a double click acts once. Returns {refresh, stop}.
"use strict";
(function () {
  function make(tag, parent, text, attrs) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }

  function loadInput(parent, label, key) {
    const box = make("span", parent, undefined, { class: "steer-load" });
    const value = make("input", box, undefined, {
      type: "number", min: "0", step: "any", size: "6", "aria-label": label + " value", "data-steer": key + "-value",
    });
    const unit = make("select", box, undefined, { "aria-label": label + " unit", "data-steer": key + "-unit" });
    make("option", unit, "users", { value: "concurrency" });
    make("option", unit, "req/s", { value: "rate" });
    return { box, value, unit };
  }

  window.loadgenSteer = function (container, basePath) {
    const base = (basePath || "").replace(/\/+$/, "") + "/loadgen/control/";
    const root = make("section", container, undefined, { class: "steer", "aria-label": "Steer the ramp" });
    make("strong", root, "Steer ");
    // data-steer names every part, for tests and for the page that mounts the panel
    const now = make("span", root, "-", { class: "steer-now", "data-steer": "now" });
    const bar = make("div", root);
    const button = (parent, text, key, title) =>
      make("button", parent, text, { type: "button", "data-steer": key, title: title || text });
    const hold = button(bar, "Hold", "hold", "keep the current step running until Release");
    const release = button(bar, "Release", "release");
    const skip = button(bar, "Skip to next", "skip", "end the current step now");
    const add = loadInput(bar, "Add step", "add");
    const addBtn = button(add.box, "Add step", "add", "one more step at the end");
    const set = loadInput(bar, "Set load", "set");
    const setBtn = button(set.box, "Set load", "set", "end the current step now and continue at this load");
    const answer = make("div", root, "", { class: "steer-answer", role: "status", "data-steer": "answer" });
    const list = make("ol", root, undefined, { class: "steer-steps", "data-steer": "steps" });
    let state = null;
    let timer = null;

    function describe(s) {
      if (!s || !s.steps || !s.steps.length) return s && s.message ? s.message : "no ramp is running";
      if (s.index === null || s.index === undefined) return s.finished ? "the ramp has finished" : s.message;
      const step = s.steps[s.index];
      let text = `step ${s.index} (of 0-${s.steps.length - 1}): ${step.load}, ${step.status}`;
      if (s.held) text += `, held by ${s.held_by}`;
      else if (s.ends_in_s !== null && s.ends_in_s !== undefined) text += `, ends in ${Math.round(s.ends_in_s)} s`;
      return text;
    }

    function render(s) {
      state = s;
      now.textContent = describe(s);
      const live = s && s.index !== null && s.index !== undefined;
      hold.disabled = !live || s.held;
      release.disabled = !live || !s.held;
      skip.disabled = setBtn.disabled = !live;
      addBtn.disabled = !s || !s.steps || !s.steps.length || s.finished;
      list.replaceChildren();
      for (const step of (s && s.steps) || []) {
        let text = `${step.index}. ${step.load}: ${step.status}`;
        if (step.origin) text += ` (${step.origin.action.replace("_", " ")} by ${step.origin.by})`;
        make("li", list, text, step.index === s.index ? { class: "steer-current" } : {});
      }
    }

    function show(ok, message) {
      answer.textContent = message || "";
      answer.className = "steer-answer " + (ok ? "steer-ok" : "steer-error");
    }

    async function call(path, body) {
      try {
        const init = { credentials: "same-origin", headers: { Accept: "application/json" } };
        if (body !== undefined) {
          init.method = "POST";
          init.headers["Content-Type"] = "application/json";
          init.body = JSON.stringify(body);
        }
        const resp = await fetch(base + path, init);
        const data = await resp.json();
        render(data);
        return data;
      } catch (err) {
        show(false, `${path}: ${err}`);
        return null;
      }
    }

    async function act(path, body) {
      const data = await call(path, body);
      if (data) show(data.ok, data.message);
    }

    function load(input) {
      const v = input.value.value.trim();
      if (v === "") return null;
      const body = {};
      body[input.unit.value] = input.unit.value === "concurrency" ? Number(v) : parseFloat(v);
      return body;
    }

    const current = () => (state && state.index !== null && state.index !== undefined ? { step: state.index } : {});
    hold.addEventListener("click", () => act("hold", current()));
    release.addEventListener("click", () => act("release", {}));
    skip.addEventListener("click", () => act("skip", current()));
    addBtn.addEventListener("click", () => {
      const body = load(add);
      if (body) act("add-step", body);
      else show(false, "Add step: type a number of users or a rate first");
    });
    setBtn.addEventListener("click", () => {
      const body = load(set);
      if (body) act("set-load", Object.assign(current(), body));
      else show(false, "Set load: type a number of users or a rate first");
    });

    const refresh = () => call("state");
    refresh();
    timer = setInterval(refresh, 2000);
    return {
      refresh,
      stop() {
        clearInterval(timer);
        root.remove();
      },
    };
  };
})();
