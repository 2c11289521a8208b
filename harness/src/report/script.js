(function () {
  document.documentElement.classList.add("js");
  var q = document.getElementById("q");
  var problems = document.getElementById("problems");
  var shown = document.getElementById("shown");
  var rows = Array.prototype.slice.call(document.querySelectorAll("details.clause"));
  var groups = Array.prototype.slice.call(document.querySelectorAll(".group"));
  function apply() {
    var t = q.value.trim().toLowerCase();
    var n = 0;
    rows.forEach(function (d) {
      var show = (!t || d.getAttribute("data-search").indexOf(t) >= 0) &&
        (!problems.checked || d.getAttribute("data-problem") === "1");
      d.hidden = !show;
      if (show) n++;
    });
    groups.forEach(function (g) {
      g.hidden = !g.querySelector("details.clause:not([hidden])");
    });
    shown.textContent = n === rows.length ? rows.length + " clauses" : n + " of " + rows.length + " clauses";
  }
  function setOpen(open) {
    rows.forEach(function (d) { if (!d.hidden) d.open = open; });
  }
  function openTarget() {
    var id = decodeURIComponent(location.hash.slice(1));
    var d = id && document.getElementById(id);
    if (d && d.tagName === "DETAILS") { d.hidden = false; d.open = true; }
  }
  q.addEventListener("input", apply);
  problems.addEventListener("change", apply);
  document.getElementById("open-all").addEventListener("click", function () { setOpen(true); });
  document.getElementById("close-all").addEventListener("click", function () { setOpen(false); });
  window.addEventListener("hashchange", openTarget);
  apply();
  openTarget();
})();
