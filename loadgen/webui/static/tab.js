// Added to Locust's index page: shows our live page (/loadgen/) inside the "LLM" tab, in place of
// the table Locust draws for it. Locust's UI is React; we only hide that table (its rows are the
// live page's own step rows, drawn at other moments and taller: the page says it all, once) and add
// one iframe after it, removed when another tab is chosen.
"use strict";
(function () {
  const ID = "loadgen-llm-frame";
  const base = document.currentScript ? document.currentScript.src.replace(/static\/tab\.js.*$/, "") : "./loadgen/";

  function activeTab() {
    return new URLSearchParams(window.location.search).get("tab");
  }

  function panel() {
    // the tab panel is the element that follows the tabs bar: find the table Locust rendered for us
    const tables = document.querySelectorAll("table");
    for (const t of tables) {
      if (t.textContent.indexOf("Per-request tok/s") !== -1) return t.closest(".MuiTableContainer-root") || t.parentElement;
    }
    return null;
  }

  function sync() {
    let frame = document.getElementById(ID);
    if (activeTab() !== "llm") {
      if (frame) frame.remove();
      return;
    }
    const anchor = panel();
    if (!anchor) return;
    if (anchor.style.display !== "none") anchor.style.display = "none";
    if (!frame) {
      frame = document.createElement("iframe");
      frame.id = ID;
      frame.src = base;
      frame.title = "LLM live charts";
      frame.style.cssText = "width:100%;border:0;margin-top:0;height:1000px;display:block";
      anchor.insertAdjacentElement("afterend", frame);
    }
    try {
      const h = frame.contentDocument && frame.contentDocument.documentElement.scrollHeight;
      if (h && Math.abs(h - frame.clientHeight) > 4) frame.style.height = h + "px";
    } catch (e) { /* not loaded yet */ }
  }

  setInterval(sync, 500);
})();
