// The report page: draws each chart with Vega (inlined above), and the cell browser. Every text from a run
// (answers, questions, judges' replies) reaches the page through textContent, never as markup.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("nspec-data").textContent);
  const form = document.getElementById("filters");
  const list = document.getElementById("cells");
  const status = document.getElementById("browser-status");
  const loaded = new Map(); // model label -> its cells
  window.nspecReport = { chartsDrawn: 0, chartsFailed: 0, views: {} }; // for tests and the curious

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function field(dl, name, value) {
    if (value === undefined || value === null || value === "") return;
    dl.appendChild(el("dt", null, name));
    dl.appendChild(el("dd", null, value));
  }

  async function cellsOf(model) {
    if (loaded.has(model.label)) return loaded.get(model.label);
    let cells = model.cells;
    if (!cells) {
      const response = await fetch(model.file);
      if (!response.ok) throw new Error(model.file + ": " + response.status);
      cells = await response.json();
    }
    loaded.set(model.label, cells);
    return cells;
  }

  function matches(cell, wanted) {
    if (wanted.verdict && (cell.verdict || "error") !== wanted.verdict) return false;
    if (wanted.length && String(cell.length) !== wanted.length) return false;
    if (wanted.variant && String(cell.variant) !== wanted.variant) return false;
    for (const axis of data.axes) {
      const value = wanted["axis-" + axis.key];
      if (value && cell.axes[axis.key] !== value) return false;
    }
    return true;
  }

  // A length as the page writes it everywhere (notation.py): binary thousands in K (4096 is 4K), any other in full.
  function length(tokens) {
    return tokens % 1024 === 0 && tokens % 1000 !== 0 ? tokens / 1024 + "K" : tokens.toLocaleString("en-US");
  }

  // Where the cell stands on the family's axes: its depth and where its needle was placed, or each axis's value.
  function where(cell) {
    const parts = cell.negative ? ["negative control"] : [];
    for (const axis of data.axes) {
      const value = cell.axes[axis.key];
      if (value === undefined) continue;
      parts.push(axis.key === "depth"
        ? "depth " + value + "% (placed at " + (cell.depth_actual === null ? "?" : cell.depth_actual.toFixed(1)) + "%)"
        : axis.label + " " + value);
    }
    return parts;
  }

  function money(value) {
    return value === null || value === undefined ? "unknown" : "$" + value.toFixed(6);
  }

  function cellView(cell) {
    const verdict = cell.verdict || "error";
    const card = el("article", "cell " + verdict);
    card.dataset.cell = cell.id;
    card.dataset.length = cell.length;
    if (cell.axes.depth !== undefined) card.dataset.depth = cell.axes.depth;
    const title = el("h3");
    title.appendChild(el("span", "verdict " + verdict, verdict));
    title.appendChild(document.createTextNode(
      "  " + [cell.model, length(cell.length) + " tokens (" + cell.tokens_compiled.toLocaleString("en-US") + " compiled)",
        ...where(cell), "trial " + (cell.trial + 1)].join(" · ")
    ));
    card.appendChild(title);
    const dl = el("dl");
    field(dl, "question", cell.question);
    field(dl, "expected", cell.expected.length ? cell.expected.join(" | ") : "not found (no needle)");
    for (const detail of cell.details) field(dl, detail.label, detail.value);
    field(dl, "answer", cell.answer === null ? "(no answer yet)" : cell.answer);
    field(dl, "error", cell.error);
    field(dl, "verdict", cell.reason ? verdict + ": " + cell.reason : verdict);
    for (const s of cell.scorers) field(dl, s.scorer, s.verdict + (s.reason ? ": " + s.reason : ""));
    if (cell.votes.length) {
      const votes = el("ul", "votes");
      for (const v of cell.votes) {
        const item = el("li", null, v.judge + ": " + (v.vote || "no verdict") + " ");
        if (v.reply) {
          const reply = el("details");
          reply.appendChild(el("summary", null, "reply"));
          reply.appendChild(el("div", "excerpt", v.reply));
          item.appendChild(reply);
        }
        votes.appendChild(item);
      }
      dl.appendChild(el("dt", null, "judges"));
      const dd = el("dd");
      dd.appendChild(votes);
      dl.appendChild(dd);
    }
    if (cell.input_tokens !== null) {
      field(dl, "tokens", cell.input_tokens.toLocaleString() + " in, " + cell.output_tokens.toLocaleString() + " out");
    }
    field(dl, "cost", money(cell.cost));
    card.appendChild(dl);
    if (cell.excerpt) {
      const excerpt = el("p", "excerpt");
      const mark = el("mark", null, cell.excerpt.needle);
      excerpt.appendChild(document.createTextNode(cell.excerpt.before));
      excerpt.appendChild(mark);
      excerpt.appendChild(document.createTextNode(cell.excerpt.after));
      card.appendChild(excerpt);
    }
    return card;
  }

  let drawing = 0;
  async function render() {
    const wanted = Object.fromEntries(new FormData(form).entries());
    const models = data.models.filter((m) => !wanted.model || m.label === wanted.model);
    const ticket = ++drawing;
    let cells = [];
    try {
      for (const model of models) cells = cells.concat(await cellsOf(model));
    } catch (error) {
      status.textContent = "The cells of this run are in report/cells/ beside the page; browsers do not let a page " +
        "read files, so open it with `nspec view RUN` to browse them (" + error.message + ").";
      return;
    }
    if (ticket !== drawing) return; // a newer choice came while loading
    const found = cells.filter((c) => matches(c, wanted));
    list.replaceChildren(...found.slice(0, data.shown).map(cellView));
    for (const excerpt of list.querySelectorAll(".excerpt")) { // the needle in the middle of its box
      const mark = excerpt.querySelector("mark");
      if (mark) excerpt.scrollTop = mark.offsetTop - excerpt.offsetTop - (excerpt.clientHeight - mark.offsetHeight) / 2;
    }
    status.textContent = found.length + " cell" + (found.length === 1 ? "" : "s") +
      (found.length > data.shown ? "; showing the first " + data.shown : "");
  }

  function choose(values) {
    for (const [name, value] of Object.entries(values)) {
      const select = form.querySelector("select[name='" + name + "']"); // (form.elements.length is a count)
      if (!select) continue;
      const text = value === null || value === undefined ? "" : String(value);
      if (![...select.options].some((o) => o.value === text)) select.appendChild(el("option", null, text));
      select.value = text;
    }
    window.nspecReport.rendered = render().then(() => document.getElementById("browser").scrollIntoView());
  }

  form.addEventListener("change", () => { window.nspecReport.rendered = render(); });

  for (const chart of data.charts) {
    const target = document.getElementById("chart-" + chart.name);
    window.vegaEmbed(target, chart.spec, { renderer: "svg", actions: false })
      .then((result) => {
        window.nspecReport.views[chart.name] = result.view;
        result.view.addEventListener("click", (event, item) => {
          const datum = item && item.datum;
          if (!datum || datum.context_length === undefined) return;
          const anywhere = Object.fromEntries(data.axes.map((axis) => ["axis-" + axis.key, ""]));
          if (chart.kind === "heatmap") {
            choose({ ...anywhere, model: chart.model, length: datum.context_length, "axis-depth": datum.depth, verdict: "" });
          } else if (chart.kind === "length" && datum.model !== undefined) {
            choose({ ...anywhere, model: datum.model, length: datum.context_length, verdict: "" });
          }
        });
        window.nspecReport.chartsDrawn += 1;
      })
      .catch((error) => {
        window.nspecReport.chartsFailed += 1;
        target.textContent = "This chart could not be drawn: " + error.message;
      });
  }
  window.nspecReport.rendered = render();
})();
