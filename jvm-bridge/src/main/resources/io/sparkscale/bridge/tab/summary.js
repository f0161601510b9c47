/*
 * The summary at the top of the page: mode, executors, pause, utilization, the last scaling, and where the figures
 * come from (the live driver's last tick, or the event log the History Server read).
 */
(function (tab) {
  "use strict";

  const {el, muted, isNum, DASH, fmt, pct, intText, clock, dateClock, cut} = tab;

  const MODE_NOTES = {
    autoscale: "decisions are applied",
    recommend: "decisions are published, never applied",
    reactive: "the executor count is held at maxExecutors",
  };

  function item(label, ...content) {
    return el("li", {}, el("strong", {}, label + ":"), " ", ...content);
  }

  /** live: the driver's page (it refreshes itself), else the History Server's, rebuilt from the event log. */
  function summary(doc, serverMs, live) {
    const s = doc.status || {};
    const config = doc.config || {};
    const list = el("ul", {class: "list-unstyled", id: "sparkscale-summary"});
    list.append(item("Mode", el("span", {id: "sparkscale-mode"}, s.mode || "?"), " ",
      muted("(" + (MODE_NOTES[s.mode] || "unknown mode") + ")")));
    list.append(item("Executors",
      el("span", {id: "sparkscale-target"}, intText(s.target_executors)), " target, ",
      el("span", {id: "sparkscale-live"}, intText(s.live_executors)), " live, ",
      el("span", {id: "sparkscale-pending"}, intText(s.pending_executors)), " pending",
      isNum(config.min_executors)
        ? [" ", muted("(allowed " + config.min_executors + " to " + config.max_executors + ")")] : []));
    if (s.waiting_for) {
      list.append(item("Waiting for", el("span", {id: "sparkscale-waiting"}, s.waiting_for)));
    }
    let pause = "no";
    if (s.paused || s.stopped) {
      pause = [el("span", {class: "sparkscale-badge"}, s.stopped ? "stopped" : "paused"), " ",
        s.pause_reason || "no reason given",
        live ? [" ", muted("(resume with autoscaler(spark).resume())")] : []];
    }
    list.append(item("Paused", el("span", {id: "sparkscale-paused"}, pause)));
    if (isNum(s.utilization)) {
      list.append(item("Utilization", pct(s.utilization), isNum(config.utilization_max)
        ? [" ", muted("(target " + pct(config.utilization_target) + ", scale up above "
          + pct(config.utilization_max) + ")")] : []));
    }
    const last = s.last_scaling;
    if (last) {
      list.append(item("Last scaling", el("span", {id: "sparkscale-last-scaling", title: last.reason},
        last.action + " " + intText(last.from_executors) + " \u2192 " + intText(last.to_executors) + " at "
        + clock(last.time) + ": " + cut(last.reason, 160))));
    }
    list.append(item("Provisioning time", isNum(s.provisioning_time_s) ? fmt(s.provisioning_time_s) + " s" : DASH,
      " ", muted("(learned: request to registered executor)")));
    if (s.errors > 0) {
      list.append(item("Errors", s.errors + (s.last_error ? ", last: " + s.last_error : "")));
    }
    const counts = doc.counts || {};
    if (live) {
      const ageS = isNum(doc.published) ? Math.max(0, Math.round(serverMs / 1000 - doc.published)) : null;
      const interval = config.interval_s;
      const stale = isNum(ageS) && isNum(interval) && ageS > 3 * interval + 30;
      list.append(item("Last tick", el("span", {id: "sparkscale-last-tick"}, dateClock(doc.published) || "?"),
        isNum(ageS) ? [" (", el("span", {id: "sparkscale-tick-age", "data-age-s": ageS}, ageS + " s ago"), ")"] : [],
        isNum(interval) ? "; the control loop runs every " + fmt(interval) + " s " : " ",
        stale ? [el("strong", {class: "sparkscale-alert"}, "stale: the control loop may have stopped"), " "] : [],
        muted("(this page refreshes itself)")));
    } else {
      list.append(item("Last tick", el("span", {id: "sparkscale-last-tick"},
        dateClock(doc.published) || "none recorded")));
      list.append(item("Source", el("span", {id: "sparkscale-source"}, "rebuilt from the event log: "
        + (counts.ticks || 0) + " tick summaries, " + (counts.scalings || 0) + " scaling events, "
        + (counts.events || 0) + " other events; " + (isNum(doc.ended)
          ? "the application ended " + dateClock(doc.ended)
          : "the application had not ended when the log was read"))));
    }
    return list;
  }

  tab.summary = summary;
})(window.sparkscaleTab = window.sparkscaleTab || {});
