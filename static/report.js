// gpu-triage report page, progressive enhancement (no framework): while a reproduction is queued
// or running (#reproduction carries data-pending), fetch the page again every few seconds and
// swap in the reproduction section and the header's reproduction lines, so the reader keeps
// their place and whatever they were typing. Once nothing is pending, reload the page once
// (browsers keep the scroll position on a reload) so the headline, category and traces all show
// the result. Without JavaScript a <noscript> meta refresh reloads the whole page instead.
(function () {
  "use strict";
  var section = document.getElementById("reproduction");
  if (!section || !section.hasAttribute("data-pending") || !window.fetch || !window.DOMParser) {
    return;
  }
  var every = (parseInt(section.getAttribute("data-refresh"), 10) || 10) * 1000;

  function swap(fresh, id) {
    var mine = document.getElementById(id);
    var theirs = fresh.getElementById(id);
    if (mine && theirs) {
      mine.replaceWith(document.importNode(theirs, true));
    }
  }

  function tick() {
    fetch(window.location.pathname + window.location.search, {
      credentials: "same-origin",
      headers: { Accept: "text/html" }
    })
      .then(function (res) {
        if (!res.ok) {
          throw new Error("HTTP " + res.status);
        }
        return res.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html");
        var next = fresh.getElementById("reproduction");
        if (!next || !next.hasAttribute("data-pending")) {
          window.location.reload();
          return;
        }
        swap(fresh, "repro-head");
        swap(fresh, "reproduction");
        window.setTimeout(tick, every);
      })
      .catch(function () {
        // The server may be restarting or the session gone: try again, less often.
        window.setTimeout(tick, every * 3);
      });
  }

  window.setTimeout(tick, every);
})();
