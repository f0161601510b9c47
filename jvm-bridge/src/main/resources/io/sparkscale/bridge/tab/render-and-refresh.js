/*
 * The Autoscaler tab's page, on the driver UI and in the History Server alike: renders the document in
 * #sparkscale-document (JSON built by TabDocument.java from the autoscaler's listener events; schema
 * $defs/document in autoscaler-tab.schema.json) into #sparkscale-page, with the parts the files before this one
 * define. This file runs last.
 *
 * The live page (data-source="live") fetches itself once per control interval and renders the new document in
 * place; the age of the last tick counts up in between. Three failed fetches in a row (the driver is gone once the
 * application ends) stop it, with a note saying so.
 */
(function (tab) {
  "use strict";

  const root = document.getElementById("sparkscale-page");
  if (!root) {
    return;
  }
  const live = root.dataset.source === "live";
  const {el, section, isNum, summary, chart, queries, decisions, events} = tab;

  function render(doc, serverMs) {
    root.replaceChildren();
    if (!doc) {
      root.append(el("p", {id: "sparkscale-no-status"}, "The autoscaler has not reported yet: it does at the end of "
        + "every control tick, so the first report appears one interval after the session started."));
      return;
    }
    root.dataset.published = isNum(doc.published) ? String(doc.published) : "";
    if (live && isNum((doc.config || {}).interval_s)) {
      // Once per control tick, within sane bounds.
      root.dataset.refreshMs = String(Math.round(Math.max(2, Math.min(30, doc.config.interval_s)) * 1000));
    }
    root.append(summary(doc, serverMs, live), ...section("Executors against load", chart(doc, root.clientWidth)),
      ...queries(doc), ...decisions(doc), ...events(doc));
  }

  function documentOf(page) {
    const data = page.getElementById("sparkscale-document");
    return data ? JSON.parse(data.textContent) : null;
  }

  render(documentOf(document), Number(root.dataset.serverMs) || Date.now());
  if (!live) {
    return;
  }

  let refreshes = 0;
  let failures = 0;
  const every = () => Number(root.dataset.refreshMs) || 5000;
  const note = (text) => {
    document.getElementById("sparkscale-refresh-note").textContent = text;
  };

  function showAge() {
    const age = document.getElementById("sparkscale-tick-age");
    if (!age) {
      return;
    }
    if (!age.dataset.shownAt) {
      age.dataset.shownAt = String(Date.now());
    }
    const seconds = Number(age.dataset.ageS) + Math.floor((Date.now() - Number(age.dataset.shownAt)) / 1000);
    age.textContent = seconds + " s ago";
  }

  function refresh() {
    if (document.hidden) {
      setTimeout(refresh, every());
      return;
    }
    fetch(window.location.href, {cache: "no-store", credentials: "same-origin"})
      .then((response) => {
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then((text) => {
        const page = new DOMParser().parseFromString(text, "text/html");
        const next = page.getElementById("sparkscale-page");
        if (!next || !page.getElementById("sparkscale-document")) {
          throw new Error("the page has no autoscaler document");
        }
        render(documentOf(page), Number(next.dataset.serverMs) || Date.now());
        refreshes += 1;
        root.dataset.refreshes = String(refreshes);
        failures = 0;
        note("");
        showAge();
        setTimeout(refresh, every());
      })
      .catch((err) => {
        failures += 1;
        if (failures >= 3) {
          note("This page stopped refreshing: the driver does not answer (" + err.message
            + "); the application may have ended. Its History Server shows the same tab.");
          return;
        }
        setTimeout(refresh, every());
      });
  }

  setInterval(showAge, 1000);
  setTimeout(refresh, every());
})(window.sparkscaleTab = window.sparkscaleTab || {});
