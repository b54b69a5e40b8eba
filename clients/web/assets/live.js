/* onceq-web live updates: every few seconds, ask for the same page with
   the X-Onceq-Live header (the server answers its main part only) and
   swap it in. Pages work without this: it only saves a reload. It pauses
   while the tab is hidden, while a form field has the focus or holds text,
   and after an answer that is not 200 (an error page stays readable). */
(function () {
  'use strict';
  var PERIOD_MS = 5000;
  function busy() {
    var a = document.activeElement;
    if (a && (a.tagName === 'INPUT' || a.tagName === 'TEXTAREA' || a.tagName === 'SELECT'))
      return true;
    var t = document.querySelectorAll('textarea');
    for (var i = 0; i < t.length; i++) if (t[i].value) return true;
    var d = document.querySelectorAll('details[open]');
    return d.length > 0;
  }
  function tick() {
    var main = document.getElementById('live');
    if (!main || document.hidden || busy() || document.getElementById('error') ||
        document.getElementById('confirm') || document.getElementById('done'))
      return;
    fetch(location.href, { headers: { 'X-Onceq-Live': '1' }, credentials: 'same-origin' })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html !== null && !busy()) {
          main.innerHTML = html;
          document.body.setAttribute('data-live', String(Date.now()));
        }
      })
      .catch(function () {});
  }
  setInterval(tick, PERIOD_MS);
})();
