// gpu-triage group list, progressive enhancement (no framework): a "select all" box in the
// table's header ticks or clears every group's box of the bulk form. Without JavaScript each
// group is ticked by hand; the form works the same.
(function () {
  "use strict";
  var cell = document.querySelector("table.groups th.pick-all");
  if (!cell) {
    return;
  }
  var boxes = document.querySelectorAll("input[type=checkbox][form=bulk]");
  var all = document.createElement("input");
  all.type = "checkbox";
  all.id = "pick-all";
  all.setAttribute("aria-label", "Select every group on this page");
  all.addEventListener("change", function () {
    for (var i = 0; i < boxes.length; i++) {
      boxes[i].checked = all.checked;
    }
  });
  cell.textContent = "";
  cell.appendChild(all);
})();
