/* The table of pauses, blocks and the autoscaler's other events, newest first. */
(function (tab) {
  "use strict";

  const {el, section, table, muted, cssName, clock} = tab;

  function events(doc) {
    const list = doc.events || [];
    const title = "Pauses, blocks and other events";
    if (!list.length) {
      return section(title, el("p", {}, "None."));
    }
    const rows = list.slice().reverse().map((e) => el("tr", {
      class: "sparkscale-event sparkscale-event-" + cssName(e.kind) + " sparkscale-severity-" + cssName(e.severity),
    }, el("td", {class: "nowrap"}, clock(e.time)), el("td", {}, e.kind), el("td", {}, e.severity),
    el("td", {}, e.reason, e.suppressed ? [" ", muted("(" + e.suppressed + " identical before it not shown)")] : [])));
    return section(title, table("sparkscale-events", ["Time", "Kind", "Severity", "Reason"], rows));
  }

  tab.events = events;
})(window.sparkscaleTab = window.sparkscaleTab || {});
