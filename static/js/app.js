/* capplan pages: draw the plotly figures embedded as JSON, and keep field error states in sync. */
(function () {
  "use strict";

  function drawCharts(root) {
    if (typeof Plotly === "undefined") { return; }
    root.querySelectorAll("[data-figure]").forEach(function (el) {
      var source = document.getElementById(el.dataset.figure);
      if (!source || el.dataset.drawn === source.textContent.length + "") { return; }
      var fig = JSON.parse(source.textContent);
      Plotly.newPlot(el, fig.data, fig.layout, {displaylogo: false, responsive: true,
        modeBarButtonsToRemove: ["select2d", "lasso2d"]});
      el.dataset.drawn = source.textContent.length + "";
    });
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
      if (has) { select.remove(0); select.selectedIndex = 0; }
      return;
    }
    if (!has) { first = new Option("", ""); select.add(first, 0); }
    first.text = PASTED + name;
    first.value = "";
    select.selectedIndex = 0;
  }

  function onLoad(root) { drawCharts(root || document); syncErrors(root || document); }

  document.addEventListener("DOMContentLoaded", function () { onLoad(document); });
  document.addEventListener("focusin", copyShareLink);
  document.addEventListener("change", serverSetsGpu);
  document.addEventListener("input", pastedConfigNamesModel);
  document.addEventListener("htmx:afterSettle", function (event) { onLoad(event.detail.elt); });
  window.addEventListener("load", function () { drawCharts(document); });
})();
