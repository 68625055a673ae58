// Injected into a copy of a report page by tests/test_report_browser.py: once every chart is drawn, checks what a
// reader sees (layout boxes, not DOM text), clicks a heatmap cell, and writes the findings as JSON into
// <pre id="checks"> for `chromium --dump-dom` to print.
(function () {
  "use strict";
  const findings = { problems: [], facts: {} };
  const problem = (text) => findings.problems.push(text);

  function box(node) {
    const r = node.getBoundingClientRect();
    return { left: r.left, top: r.top + window.scrollY, right: r.right, bottom: r.bottom + window.scrollY, width: r.width, height: r.height };
  }

  function visible(node, name) {
    const style = getComputedStyle(node);
    const b = box(node);
    if (style.display === "none" || style.visibility === "hidden" || b.width === 0 || b.height === 0) {
      problem(name + " is not visible");
    } else if (b.left < 0 || b.right > window.innerWidth + 1) {
      problem(name + " reaches outside the viewport horizontally: " + JSON.stringify(b));
    }
    if (node.closest("script")) problem(name + " is inside a script");
    return b;
  }

  function overlaps(a, b) {
    return a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
  }

  function checkCharts() {
    for (const figure of document.querySelectorAll("figure.chart")) {
      const name = figure.dataset.name;
      const svg = figure.querySelector("svg");
      if (!svg) { problem(name + ": no chart drawn"); continue; }
      visible(svg, name);
      const legends = [...svg.querySelectorAll("g.role-legend")].filter((g) => box(g).width > 0);
      findings.facts[name + ":legends"] = legends.length;
      if (/^(heatmap|length|location|negatives|cost)/.test(name)) {
        if (!legends.length) problem(name + ": no visible legend");
        for (const legend of legends) {
          const b = box(legend);
          if (b.right > window.innerWidth + 1 || b.left < 0) problem(name + ": legend off screen " + JSON.stringify(b));
        }
      }
      for (const axis of svg.querySelectorAll("g.role-axis")) {
        const labels = [...axis.querySelectorAll("g.role-axis-label text")].filter(
          (t) => t.getAttribute("opacity") !== "0" && getComputedStyle(t).opacity !== "0" && box(t).width > 0
        );
        for (let i = 0; i < labels.length; i++) {
          for (let j = i + 1; j < labels.length; j++) {
            if (overlaps(box(labels[i]), box(labels[j]))) {
              problem(name + ": tick labels overlap: " + labels[i].textContent + " / " + labels[j].textContent);
            }
          }
        }
      }
    }
  }

  async function clickHeatmap() {
    const figure = document.querySelector("figure.chart[data-name^='heatmap-']");
    if (!figure) return;
    const rect = figure.querySelector("g.mark-rect path");
    if (!rect) { problem("heatmap: no cell to click"); return; }
    const datum = rect.__data__ && rect.__data__.datum;
    const before = window.nspecReport.rendered;
    rect.dispatchEvent(new MouseEvent("click", { bubbles: true, cancelable: true, view: window }));
    if (window.nspecReport.rendered === before) problem("clicking a heatmap cell did nothing");
    await window.nspecReport.rendered;
    const cards = [...document.querySelectorAll("#cells article")];
    findings.facts.clicked = datum ? { length: datum.context_length, depth: datum.depth } : null;
    findings.facts.listed = cards.length;
    findings.facts.status = document.getElementById("browser-status").textContent;
    findings.facts.form = Object.fromEntries(new FormData(document.getElementById("filters")).entries());
    if (!cards.length) { problem("clicking a heatmap cell listed no cells"); return; }
    for (const card of cards) {
      if (datum && (Number(card.dataset.length) !== datum.context_length || Number(card.dataset.depth) !== datum.depth)) {
        problem("a listed cell is not the clicked one's: " + card.dataset.length + "/" + card.dataset.depth);
      }
    }
    const mark = cards[0].querySelector(".excerpt mark");
    findings.facts.needle = mark ? mark.textContent : null;
    if (!mark) problem("the cell shows no highlighted needle");
    else {
      const m = mark.getBoundingClientRect(), frame = mark.parentElement.getBoundingClientRect();
      if (m.height === 0 || m.top < frame.top - 1 || m.bottom > frame.bottom + 1) {
        problem("the highlighted needle is scrolled out of its excerpt's box");
      }
    }
    visible(cards[0], "the first listed cell");
  }

  async function run() {
    const expected = document.querySelectorAll("figure.chart").length;
    for (let i = 0; i < 100 && window.nspecReport.chartsDrawn + window.nspecReport.chartsFailed < expected; i++) {
      await new Promise((r) => setTimeout(r, 100));
    }
    findings.facts.drawn = window.nspecReport.chartsDrawn;
    findings.facts.failed = window.nspecReport.chartsFailed;
    window.scrollTo(0, 0);
    const h1 = document.querySelector("header h1");
    const b = visible(h1, "the title");
    if (b.bottom > window.innerHeight) problem("the title is below the first screen");
    findings.facts.title = h1.textContent;
    const summary = document.querySelector("#summary table");
    const s = visible(summary, "the summary table");
    if (s.top > window.innerHeight) problem("the summary starts below the first screen");
    findings.facts.summaryRows = summary.querySelectorAll("tbody tr").length;
    findings.facts.titles = document.querySelectorAll("title").length;
    const caching = document.querySelector("#caching table");  // only for runs with a cache control arm
    if (caching) {
      visible(caching, "the caching table");
      findings.facts.cachingRows = caching.querySelectorAll("tbody tr").length;
      findings.facts.cachingText = caching.querySelector("tbody tr").innerText;
    }
    checkCharts();
    await window.nspecReport.rendered;  // the browser's first list, before any click
    const first = document.querySelector("#cells article");
    findings.facts.firstCell = first ? {
      title: first.querySelector("h3").textContent,
      fields: [...first.querySelectorAll("dt")].map((dt) => dt.textContent),
    } : null;
    findings.facts.filters = [...document.querySelectorAll("#filters select")].map((s) => s.name);
    await clickHeatmap();
    findings.facts.resources = performance.getEntriesByType("resource").map((e) => e.name);
    const out = document.createElement("pre");
    out.id = "checks";
    out.textContent = JSON.stringify(findings);
    document.body.appendChild(out);
  }
  window.addEventListener("load", () => { run().catch((e) => problem("checker: " + e)); });
})();
