// Refreshes every element with data-refresh="<url>" every data-every ms (default 2000)
// by fetching the server-rendered fragment and swapping it in. No framework, no build.
// Places timeline bars from their data-left / data-width (percent): the page's
// Content-Security-Policy allows no inline style attribute, but script may set styles.
(function () {
  "use strict";
  function placeBars(root) {
    root.querySelectorAll("[data-left][data-width]").forEach(function (el) {
      el.style.left = parseFloat(el.dataset.left) + "%";
      el.style.width = parseFloat(el.dataset.width) + "%";
    });
  }
  function refresh(el) {
    if (document.hidden) return;
    fetch(el.dataset.refresh, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) { el.innerHTML = html; placeBars(el); el.classList.remove("stale"); })
      .catch(function () { el.classList.add("stale"); });
  }
  document.addEventListener("DOMContentLoaded", function () {
    placeBars(document);
    document.querySelectorAll("[data-refresh]").forEach(function (el) {
      var every = parseInt(el.dataset.every || "2000", 10);
      setInterval(function () { refresh(el); }, every);
    });
  });
})();
