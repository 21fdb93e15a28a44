// Keyboard walking of the review queue: j/k move the current row, Enter opens it;
// on a case opened from the queue, j/k go to the next/previous queued case and u back.
(function () {
  "use strict";
  function typing(e) {
    var t = e.target;
    return t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable);
  }
  var table = document.querySelector("table[data-keys=queue]");
  var nav = document.querySelector("nav[data-keys=case]");
  document.addEventListener("keydown", function (e) {
    if (typing(e) || e.altKey || e.ctrlKey || e.metaKey) { return; }
    if (table) {
      var rows = Array.prototype.slice.call(table.querySelectorAll("tbody tr"));
      var at = rows.findIndex(function (r) { return r.classList.contains("current"); });
      var to = at;
      if (e.key === "j") { to = Math.min(rows.length - 1, at + 1); }
      else if (e.key === "k") { to = Math.max(0, at - 1); }
      else if (e.key === "Enter" && at >= 0) { window.location.href = rows[at].dataset.href; return; }
      else { return; }
      e.preventDefault();
      rows[at].classList.remove("current"); rows[at].removeAttribute("aria-current");
      rows[to].classList.add("current"); rows[to].setAttribute("aria-current", "true");
      rows[to].scrollIntoView({ block: "nearest" });
    } else if (nav) {
      var link = nav.querySelector("a[data-key='" + e.key + "']");
      if (link) { e.preventDefault(); window.location.href = link.getAttribute("href"); }
    }
  });
})();
