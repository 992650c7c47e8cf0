/* capplan pages: draw the plotly figures embedded as JSON, and keep field error states in sync. */
(function () {
  "use strict";

  function drawCharts(root) {
    if (typeof Plotly === "undefined") { return; }
    root.querySelectorAll("[data-figure]").forEach(function (el) {
      var source = document.getElementById(el.dataset.figure);
      if (!source || el.dataset.drawn === source.textContent.length + "") { return; }
      var fig = narrow(JSON.parse(source.textContent), el);
      Plotly.newPlot(el, fig.data, fig.layout, Object.assign({displaylogo: false, responsive: true,
        modeBarButtonsToRemove: ["select2d", "lasso2d"]}, fig.config));
      el.dataset.drawn = source.textContent.length + "";
    });
  }

  /* On a phone-width chart (under 560 px): no mode bar (it covered the titles), the legend below in one
     or two columns with room made for it, thin side margins, long category labels of horizontal bars wrapped,
     bar values placed inside the bar when they do not fit outside. */
  var NARROW = 560;
  function wrapLabel(label, max) {
    max = max || 18;
    if (typeof label !== "string" || label.length <= max) { return label; }
    var lines = [], line = "";
    label.split(" ").forEach(function (word) {
      if (line && (line + " " + word).length > max) { lines.push(line); line = word; }
      else { line = line ? line + " " + word : word; }
    });
    if (line) { lines.push(line); }
    return lines.join("<br>");
  }
  /* Vertical bars whose long category names would be set on end (and squash the plot): lay them on their
     side, one row per category, each name wrapped beside its bar. Only for figures made of bars alone. */
  function flipLongColumns(fig, layout) {
    var bars = fig.data.every(function (t) { return t.type === "bar" && t.orientation !== "h"; });
    var names = bars && fig.data.length ? fig.data[0].x : null;
    if (!Array.isArray(names) || names.length < 3) { return; }
    var longest = Math.max.apply(null, names.map(function (n) { return String(n).length; }));
    if (longest <= 12) { return; }
    fig.data.forEach(function (t) {
      var x = t.x; t.x = t.y; t.y = x; t.orientation = "h";
      if (t.hovertemplate) { t.hovertemplate = t.hovertemplate.replace(/%\{x\}/g, "%{Y}").replace(/%\{y([^}]*)\}/g, "%{x$1}").replace(/%\{Y\}/g, "%{y}"); }
    });
    var xa = layout.xaxis || {}, ya = layout.yaxis || {};
    layout.xaxis = Object.assign({}, ya, {automargin: true});
    layout.yaxis = Object.assign({}, xa, {autorange: "reversed", automargin: true, tickangle: 0});
    layout.height = 110 + 46 * names.length;
  }

  function narrow(fig, el) {
    var width = el.clientWidth || window.innerWidth;
    if (width >= NARROW) { return fig; }
    var layout = fig.layout || {};
    flipLongColumns(fig, layout);
    var legendItems = fig.data.filter(function (t) { return t.showlegend !== false; }).length;
    if (layout.showlegend !== false && legendItems > 1) {
      var columns = width >= 420 ? 2 : 1;
      var rows = Math.ceil(legendItems / columns);
      layout.legend = Object.assign({}, layout.legend, {orientation: "h", xref: "container", yref: "container",
        y: 0, yanchor: "bottom", x: 0, xanchor: "left", entrywidth: 1 / columns, entrywidthmode: "fraction",
        font: {size: 11}});
      layout.margin = Object.assign({}, layout.margin, {b: 60 + 20 * rows});
      layout.height = (layout.height || 320) + 20 * rows;
    }
    layout.margin = Object.assign({}, layout.margin, {l: 4, r: 14});
    if (layout.title) {
      /* a title longer than the chart is wide (about 7 px a character at 13 px) goes on more lines, the top
         margin and the height growing by a line each */
      var text = wrapLabel(layout.title.text, Math.max(18, Math.floor((width - 8) / 7)));
      var extra = typeof text === "string" ? text.split("<br>").length - 1 : 0;
      layout.title = Object.assign({}, layout.title, {text: text, font: Object.assign({}, layout.title.font, {size: 13})});
      if (extra) {
        layout.margin = Object.assign({}, layout.margin, {t: ((layout.margin || {}).t || 44) + 17 * extra});
        layout.height = (layout.height || 320) + 17 * extra;
      }
    }
    var horizontal = fig.data.some(function (t) { return t.type === "bar" && t.orientation === "h"; });
    fig.data.forEach(function (t) {
      if (horizontal && Array.isArray(t.y)) { t.y = t.y.map(function (label) { return wrapLabel(label); }); }
      if (t.type === "bar" && t.textposition === "outside") { t.textposition = "auto"; }
    });
    fig.layout = layout;
    fig.config = {displayModeBar: false};
    return fig;
  }

  function syncErrors(root) {
    document.querySelectorAll(".field-error").forEach(function (span) {
      var field = span.closest(".field");
      if (!field) { return; }
      var bad = span.textContent.trim() !== "";
      field.classList.toggle("has-error", bad);
      field.querySelectorAll("input, select, textarea").forEach(function (input) {
        if (bad) { input.setAttribute("aria-invalid", "true"); } else { input.removeAttribute("aria-invalid"); }
      });
    });
  }

  function copyShareLink(event) {
    var target = event.target;
    if (target && target.id === "share-url") { target.select(); }
  }

  /* Picking a catalog server sets the GPU field to the server's GPU (app/web/form_start.py does the same on
     the server for pages without JavaScript). */
  function serverSetsGpu(event) {
    var server = event.target;
    if (!server || server.id !== "f-hardware-server") { return; }
    var option = server.options[server.selectedIndex];
    var gpu = document.getElementById("f-hardware-gpu");
    if (!gpu || !option || !option.dataset.gpu) { return; }
    gpu.value = option.dataset.gpu;
    var help = document.getElementById("help-f-hardware-server");
    if (help) { help.textContent = "Sets the GPU: " + gpu.options[gpu.selectedIndex].text; }
  }

  /* A pasted config.json names itself in the model field: _name_or_path, name, architectures[0], model_type. */
  var PASTED = "Pasted config.json: ";
  function pastedName(text) {
    var cfg;
    try { cfg = JSON.parse(text); } catch (e) { return null; }
    if (!cfg || typeof cfg !== "object" || Array.isArray(cfg)) { return null; }
    var archs = Array.isArray(cfg.architectures) ? cfg.architectures : [];
    var picks = [cfg._name_or_path, cfg.name, archs[0], cfg.model_type];
    for (var i = 0; i < picks.length; i++) {
      if (typeof picks[i] === "string" && picks[i].trim()) { return picks[i].trim().slice(0, 200); }
    }
    return "unnamed model";
  }
  function pastedConfigNamesModel(event) {
    var area = event.target;
    if (!area || area.id !== "f-model-json") { return; }
    var select = document.getElementById("f-model");
    if (!select) { return; }
    var name = area.value.trim() ? pastedName(area.value) : null;
    var first = select.options[0];
    var has = first && first.value === "" && first.text.indexOf(PASTED) === 0;
    if (name === null) {
      if (has) {
        select.remove(0);
        select.value = select.dataset.preset || "";
        if (select.selectedIndex < 0) { select.selectedIndex = 0; }
      }
      return;
    }
    if (!has) { select.dataset.preset = select.value; first = new Option("", ""); select.add(first, 0); }
    first.text = PASTED + name;
    first.value = "";
    select.selectedIndex = 0;
  }

  /* The language switch returns to the page as it is now (htmx may have pushed a newer URL since it was drawn). */
  function switchLanguage(event) {
    var link = event.target && event.target.closest ? event.target.closest(".lang-switch a") : null;
    if (!link) { return; }
    var url = new URL(link.href, window.location.href);
    url.searchParams.set("next", window.location.pathname + window.location.search);
    link.href = url.toString();
  }

  function onLoad(root) { drawCharts(root || document); syncErrors(root || document); }

  document.addEventListener("DOMContentLoaded", function () { onLoad(document); });
  document.addEventListener("focusin", copyShareLink);
  document.addEventListener("change", serverSetsGpu);
  document.addEventListener("click", switchLanguage);
  document.addEventListener("input", pastedConfigNamesModel);
  document.addEventListener("htmx:afterSettle", function (event) { onLoad(event.detail.elt); });
  window.addEventListener("load", function () { drawCharts(document); });
})();
