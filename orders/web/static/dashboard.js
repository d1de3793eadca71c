// Refreshes every element with data-refresh="<url>" every data-every ms (default 2000)
// by fetching the server-rendered fragment and swapping it in. No framework, no build.
(function () {
  "use strict";
  function refresh(el) {
    if (document.hidden) return;
    fetch(el.dataset.refresh, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) { el.innerHTML = html; el.classList.remove("stale"); })
      .catch(function () { el.classList.add("stale"); });
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-refresh]").forEach(function (el) {
      var every = parseInt(el.dataset.every || "2000", 10);
      setInterval(function () { refresh(el); }, every);
    });
  });
})();
