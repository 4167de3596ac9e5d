// envduels view: keeps a run's pages current without a reload.
// Polls the run's live.json (same origin) and writes numbers with textContent only: nothing
// from the database is ever parsed as HTML. Links use the URL the server built.
(function () {
  "use strict";
  var url = document.body.getAttribute("data-live");
  if (!url) { return; }
  var status = document.getElementById("live-status");
  var PERIOD_MS = 2000;

  function pick(obj, path) {
    return path.split(".").reduce(function (o, k) { return o == null ? undefined : o[k]; }, obj);
  }

  function number(v) {
    return typeof v === "number" && Number.isInteger(v) ? v.toLocaleString("en-US") : String(v);
  }

  function cell(text, cls) {
    var td = document.createElement("td");
    td.textContent = text;
    if (cls) { td.className = cls; }
    return td;
  }

  function latest(rows) {
    var body = document.getElementById("latest");
    if (!body) { return; }
    var fresh = document.createElement("tbody");
    fresh.id = "latest";
    rows.forEach(function (x) {
      var tr = document.createElement("tr");
      var td = document.createElement("td");
      var a = document.createElement("a");
      if (x.url.indexOf("/run/") === 0) { a.setAttribute("href", x.url); }
      a.textContent = x.env_id;
      td.appendChild(a);
      tr.appendChild(td);
      tr.appendChild(cell(x.solver));
      tr.appendChild(cell(number(x.seed)));
      tr.appendChild(cell(x.condition));
      tr.appendChild(cell(x.outcome, "outcome-" + x.outcome.replace(/[^a-z]/g, "")));
      tr.appendChild(cell(number(x.turns)));
      fresh.appendChild(tr);
    });
    body.parentNode.replaceChild(fresh, body);
  }

  function apply(data) {
    if (document.body.hasAttribute("data-await-analysis") && data.analysis_ready) {
      window.location.reload();   // the page was drawn before the first analysis was done
      return;
    }
    document.querySelectorAll("[data-live-key]").forEach(function (el) {
      var v = pick(data, el.getAttribute("data-live-key"));
      if (v === undefined) { return; }
      el.textContent = el.getAttribute("data-live-key") === "cost_usd" ? v.toFixed(4) : number(v);
    });
    document.querySelectorAll("[data-live-value]").forEach(function (el) {
      var v = pick(data, el.getAttribute("data-live-value"));
      if (typeof v === "number") { el.value = v; }
    });
    latest(data.latest || []);
    document.body.setAttribute("data-live-version", String(data.version));
    if (status) { status.textContent = data.episodes_left > 0 ? "· live" : "· complete"; }
  }

  function poll() {
    fetch(url, { cache: "no-store", credentials: "same-origin" })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.json(); })
      .then(apply)
      .catch(function () { if (status) { status.textContent = "· viewer unreachable, retrying"; } })
      .finally(function () { setTimeout(poll, PERIOD_MS); });
  }
  setTimeout(poll, PERIOD_MS);
}());
