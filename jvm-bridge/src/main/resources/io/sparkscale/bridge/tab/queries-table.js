/* The streaming queries' table: each query's figures as the autoscaler last evaluated them, and why. */
(function (tab) {
  "use strict";

  const {el, section, table, isNum, fmt, pct, clock} = tab;

  function queries(doc) {
    const list = doc.queries || [];
    if (!list.length) {
      return section("Streaming queries", el("p", {}, "No streaming query has reported progress yet."));
    }
    const blocked = (doc.status || {}).blocked_queries || {};
    const rows = list.map((q) => {
      const id = q.id || q.name || "";
      const notes = [];
      if (isNum(q.evaluated_at)) {
        // After a change the evaluator waits for a full window: the figures are the last ones.
        notes.push("utilization, arrival and slots as evaluated at " + clock(q.evaluated_at)
          + " (waiting for a full metrics window since)");
      }
      if (q.active === false) {
        notes.push("terminated");
      }
      if (q.backlog_mode) {
        notes.push("backlog mode (no scale-down)");
      }
      if (blocked[id]) {
        notes.push("scale-ups blocked: " + blocked[id]);
      }
      if (q.note) {
        notes.push(q.note);
      }
      const name = q.name ? el("strong", {}, q.name) : null;
      const idText = q.id ? el("span", {class: "text-muted sparkscale-query-id"}, q.id) : null;
      return el("tr", {}, el("td", {}, name, name && idText ? el("br") : null, idText),
        el("td", {}, pct(q.utilization)), el("td", {}, fmt(q.backlog)), el("td", {}, fmt(q.input_rate)),
        el("td", {}, fmt(q.processed_rate)), el("td", {}, fmt(q.arrival_rate)), el("td", {}, fmt(q.required_slots)),
        el("td", {}, notes.join("; ")));
    });
    return section("Streaming queries", table("sparkscale-queries",
      ["Query", "Utilization", "Backlog (rows)", "Input rows/s", "Processed rows/s", "Arrival rows/s",
        "Required slots", "Notes"], rows, "table-striped"));
  }

  tab.queries = queries;
})(window.sparkscaleTab = window.sparkscaleTab || {});
