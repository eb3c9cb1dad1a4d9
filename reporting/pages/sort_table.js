(function () {
  "use strict";
  // A cell's sort key: its unrounded value (title) or text; a leading number sorts as a
  // number, "inf" above every number, "-" or empty below everything in either direction.
  function key(cell) {
    var text = (cell.getAttribute("title") || cell.textContent || "").trim();
    if (text === "" || text === "-") { return {missing: true}; }
    if (/^\+?inf\b/i.test(text)) { return {num: Infinity}; }
    var m = text.match(/^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?/i);
    return m ? {num: parseFloat(m[0])} : {str: text};
  }
  function compare(a, b) {
    if (a.missing || b.missing) { return (a.missing ? 1 : 0) - (b.missing ? 1 : 0); }
    if ("num" in a && "num" in b) { return a.num === b.num ? 0 : (a.num < b.num ? -1 : 1); }
    if ("num" in a) { return -1; }
    if ("num" in b) { return 1; }
    return a.str.localeCompare(b.str, undefined, {numeric: true, sensitivity: "base"});
  }
  function sortBy(table, col, th) {
    var header = table.rows[0];
    var asc = th.getAttribute("aria-sort") !== "ascending";
    var rows = Array.prototype.slice.call(table.rows, 1).map(function (row, i) {
      return {row: row, i: i, k: row.cells[col] ? key(row.cells[col]) : {missing: true}};
    });
    rows.sort(function (x, y) {
      var c = compare(x.k, y.k);
      if (!asc && !x.k.missing && !y.k.missing) { c = -c; }
      return c || x.i - y.i;
    });
    Array.prototype.forEach.call(header.cells, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", asc ? "ascending" : "descending");
    var body = rows.length ? rows[0].row.parentNode : null;
    rows.forEach(function (r) { body.appendChild(r.row); });
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    Array.prototype.forEach.call(table.rows[0].cells, function (th, col) {
      th.tabIndex = 0;
      th.title = "click to sort";
      th.addEventListener("click", function () { sortBy(table, col, th); });
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(table, col, th); }
      });
    });
  });
})();
