/* capplan planner page: sort the plans table in the browser, and show the search's progress while it runs.
   Without JavaScript the header links sort on the server (?sort=KEY&dir=asc|desc) and the form submits as GET. */
(function () {
  "use strict";

  function cellValue(row, index, numeric) {
    var cell = row.cells[index];
    var raw = cell ? cell.getAttribute("data-v") : "";
    if (raw === null || raw === "") { return null; }
    if (!numeric) { return raw.toLowerCase(); }
    var n = parseFloat(raw);
    return isFinite(n) ? n : null;
  }

  function rank(row) { return parseFloat(row.cells[0].getAttribute("data-v")) || 0; }

  /* Rows by one column; missing values last in either direction, ties by rank (as the server sorts). */
  function sortTable(table, th, direction) {
    var index = Array.prototype.indexOf.call(th.parentNode.children, th);
    var numeric = th.getAttribute("data-numeric") === "1";
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var sign = direction === "desc" ? -1 : 1;
    rows.sort(function (a, b) {
      var va = cellValue(a, index, numeric), vb = cellValue(b, index, numeric);
      if (va === null || vb === null) {
        if (va === vb) { return rank(a) - rank(b); }
        return va === null ? 1 : -1;
      }
      if (va < vb) { return -sign; }
      if (va > vb) { return sign; }
      return rank(a) - rank(b);
    });
    rows.forEach(function (row) { body.appendChild(row); });
    table.querySelectorAll("thead th").forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", direction === "desc" ? "descending" : "ascending");
    var key = th.getAttribute("data-key");
    var sortInput = document.getElementById("plan-sort"), dirInput = document.getElementById("plan-dir");
    if (sortInput) { sortInput.value = key; }
    if (dirInput) { dirInput.value = direction; }
    var link = th.querySelector("a");
    if (link && window.history && window.history.replaceState) {
      window.history.replaceState(window.history.state, "", link.getAttribute("href"));
    }
    table.querySelectorAll("thead th").forEach(function (h) { updateLink(h, key, direction); });
  }

  /* Keep each header's no-JS link pointing at the order a click would give. */
  function updateLink(th, key, direction) {
    var link = th.querySelector("a");
    if (!link) { return; }
    var url = new URL(link.getAttribute("href"), window.location.href);
    var own = th.getAttribute("data-key");
    var next = own === key ? (direction === "asc" ? "desc" : "asc") : th.getAttribute("data-first") || "asc";
    url.searchParams.set("sort", own);
    url.searchParams.set("dir", next);
    link.setAttribute("href", url.pathname + url.search);
  }

  document.addEventListener("click", function (event) {
    var link = event.target.closest ? event.target.closest("table[data-sortable] thead a") : null;
    if (!link || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) { return; }
    event.preventDefault();
    var th = link.closest("th"), table = link.closest("table");
    var direction = new URL(link.href, window.location.href).searchParams.get("dir") || "asc";
    sortTable(table, th, direction);
  });

  /* Progress: each htmx search carries a fresh id; poll /plan/progress?id= until the response arrives. */
  var timer = null;

  function newId() { return Date.now().toString(36) + Math.random().toString(36).slice(2, 10); }

  function stop() { if (timer !== null) { window.clearInterval(timer); timer = null; } }

  function poll(id) {
    var out = document.getElementById("plan-progress");
    if (!out) { return; }
    fetch("/plan/progress?id=" + encodeURIComponent(id), {headers: {"Accept": "application/json"}})
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) { if (data && data.text && timer !== null) { out.textContent = data.text; } })
      .catch(function () { /* the next tick tries again */ });
  }

  document.addEventListener("htmx:configRequest", function (event) {
    var elt = event.detail.elt;
    if (!elt || elt.id !== "plan-form") { return; }
    var id = newId();
    var params = event.detail.parameters;
    if (params && typeof params.set === "function") { params.set("progress", id); } else if (params) { params.progress = id; }
    var out = document.getElementById("plan-progress");
    if (out) { out.textContent = out.getAttribute("data-start") || out.textContent; }  // the page's language
    stop();
    timer = window.setInterval(function () { poll(id); }, 250);
    window.setTimeout(function () { if (timer !== null) { poll(id); } }, 60);
  });

  document.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.elt && event.detail.elt.id === "plan-form") { stop(); }
  });
})();
