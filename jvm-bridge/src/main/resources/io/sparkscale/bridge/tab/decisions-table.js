/*
 * The decisions' table, newest first: each action with its reason, and what it predicted beside what was measured
 * after it.
 */
(function (tab) {
  "use strict";

  const {el, section, table, muted, isNum, cssName, DASH, fmt, pct, intText, clock, cut} = tab;

  /** A figure of a prediction or an outcome, by its name: "batchTimeS" is "batch time" in s. */
  function figure(key, value) {
    const words = key.replace(/_/g, " ").replace(/([a-z0-9])([A-Z])/g, "$1 $2").toLowerCase().trim();
    let unit = "";
    let label = words;
    if (/ (s|sec|seconds)$/.test(words)) {
      [label, unit] = [words.replace(/ (s|sec|seconds)$/, ""), " s"];
    } else if (/ ms$/.test(words)) {
      [label, unit] = [words.replace(/ ms$/, ""), " ms"];
    } else if (/throughput|rate/.test(words)) {
      unit = " rows/s";
    } else if (/backlog|rows/.test(words)) {
      unit = " rows";
    } else if (/bytes$/.test(words)) {
      [label, unit] = [words.replace(/ bytes$/, ""), " bytes"];
    }
    if (/utilization/.test(words) && isNum(value)) {
      return {label, text: pct(value)};
    }
    if (isNum(value)) {
      return {label, text: fmt(value) + unit};
    }
    return {label, text: value === null || value === undefined ? DASH
      : typeof value === "object" ? cut(JSON.stringify(value), 80) : String(value)};
  }

  /** What a decision expected and what was measured later, side by side, for whatever figures they carry. */
  function expectations(d) {
    const predicted = d.prediction || {};
    const measured = d.outcome || {};
    const keys = [...new Set([...Object.keys(predicted), ...Object.keys(measured)])];
    if (!keys.length) {
      return "";
    }
    const both = d.outcome !== undefined;
    return el("table", {class: "sparkscale-expectations" + (both ? "" : " sparkscale-prediction-only")},
      el("thead", {}, el("tr", {}, el("th", {}, ""), el("th", {}, "predicted"),
        both ? el("th", {}, "measured") : null)),
      el("tbody", {}, keys.map((k) => el("tr", {}, el("td", {}, figure(k, predicted[k]).label),
        el("td", {}, k in predicted ? figure(k, predicted[k]).text : DASH),
        both ? el("td", {}, k in measured ? figure(k, measured[k]).text : DASH) : null))));
  }

  function decisions(doc) {
    const list = doc.decisions || [];
    if (!list.length) {
      return section("Decisions",
        el("p", {}, "No decision yet: the autoscaler decides once a full metrics window was collected."));
    }
    const rows = list.slice().reverse().map((d) => {
      const action = d.action || "?";
      const none = action === "none";
      const time = d.count > 1 ? clock(d.first_time) + " \u2013 " + clock(d.time) : clock(d.time);
      const cls = "sparkscale-decision sparkscale-" + cssName(action)
        + (none ? "" : d.applied ? " sparkscale-applied" : " sparkscale-recommended");
      return el("tr", {class: cls}, el("td", {class: "nowrap"}, time),
        el("td", {}, action + (d.count > 1 ? " \u00d7" + d.count : "")),
        el("td", {class: "nowrap"}, intText(d.from_executors) + " \u2192 " + intText(d.to_executors)),
        el("td", {}, none ? "" : d.applied ? "yes" : "no (recommendation)"),
        el("td", {}, d.reason || "", d.limited_by ? [" ", muted("(limited by " + d.limited_by + ")")] : [],
          d.suppressed ? [" ", muted("(" + d.suppressed + " identical before it not shown)")] : [],
          expectations(d)));
    });
    return section("Decisions",
      el("p", {class: "text-muted"}, "Newest first, the last " + list.length
        + " entries; consecutive decisions to do nothing are collapsed into one row."),
      table("sparkscale-decisions", ["Time", "Action", "Executors", "Applied", "Reason"], rows));
  }

  tab.decisions = decisions;
})(window.sparkscaleTab = window.sparkscaleTab || {});
