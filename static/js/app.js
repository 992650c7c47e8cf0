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

  function onLoad(root) { drawCharts(root || document); syncErrors(root || document); }

  document.addEventListener("DOMContentLoaded", function () { onLoad(document); });
  document.addEventListener("focusin", copyShareLink);
  document.addEventListener("htmx:afterSettle", function (event) { onLoad(event.detail.elt); });
  window.addEventListener("load", function () { drawCharts(document); });
})();
