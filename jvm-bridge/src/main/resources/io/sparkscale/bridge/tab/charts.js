/*
 * The page's charts, "Executors against load": executors against the rows arriving, forecast and processed, and the
 * backlog against each query's utilization, on one time axis with the scaling actions marked.
 */
(function (tab) {
  "use strict";

  const {d3x, el, isNum, fmt, short, pct, intText, cut, COLORS, PALETTE, MARGIN, legend, panel, series,
    niceTop} = tab;

  /** The charts, as wide as the page (pageWidth; 0 before layout), within 640 to 1400 px. */
  function chart(doc, pageWidth) {
    const box = el("div", {id: "sparkscale-chart"});
    const points = (doc.timeline || []).filter((p) => isNum(p.t));
    if (points.length < 2) {
      box.append(el("p", {id: "sparkscale-chart-empty"}, "The chart appears after two control ticks."));
      return box;
    }
    if (!d3x) {
      box.append(el("p", {class: "text-muted"}, "The chart needs d3, which Spark's UI serves at /static/d3.min.js; "
        + "it did not load."));
      return box;
    }
    const decisions = doc.decisions || [];
    const config = doc.config || {};
    const width = Math.max(640, Math.min(1400, pageWidth || 1000));
    // The time axis reaches every action too: the timeline keeps one point per change of figures, so
    // an action at the last tick (a rollback, then the application's end) may come after its last point.
    const actionTimes = decisions.filter((d) => d.action !== "none" && isNum(d.time)).map((d) => d.time);
    const x = d3x.time().domain([new Date(Math.min(points[0].t, ...actionTimes) * 1000),
      new Date(Math.max(points[points.length - 1].t, ...actionTimes) * 1000)])
      .range([MARGIN.left, width - MARGIN.right]);

    // Panel 1: executors (left axis) against the load (right axis): rows arriving per second (processed +
    // backlog growth), Spark's input rate where that is unknown, and the forecast beside them where the queries
    // have one (absent from the points of older event logs): applied in its color, shadow in gray.
    const arrival = points.some((p) => isNum(p.arrival_rate)) ? (p) => p.arrival_rate : (p) => p.input_rate;
    const forecastApplied = (p) => (p.forecast_applied ? p.forecast_rate : null);
    const forecastShadow = (p) => (p.forecast_applied ? null : p.forecast_rate);
    const execTop = Math.max(2, Math.ceil(Math.max(0, ...points.flatMap((p) => [p.live, p.target]).filter(isNum))) + 1);
    const execStep = Math.max(1, Math.ceil(execTop / 6));
    const execTicks = [];
    for (let v = 0; v <= execTop; v += execStep) {
      execTicks.push(v);
    }
    const rateTop = niceTop(points.flatMap((p) => [arrival(p), p.processed_rate, p.forecast_rate]), 1);
    const rateScale = d3x.linear().domain([0, rateTop]);
    const rateItems = [["live executors", COLORS.live, ""], ["target executors", COLORS.target, "7 4"],
      ["arriving rows/s (processed + backlog growth), right axis", COLORS.arrival, ""],
      ["processed rows/s, right axis", COLORS.processed, "2 3"]];
    if (points.some((p) => isNum(forecastApplied(p)))) {
      rateItems.push(["forecast rows/s (applied), right axis", COLORS.forecast, "6 3"]);
    }
    if (points.some((p) => isNum(forecastShadow(p)))) {
      rateItems.push(["forecast rows/s (shadow: not applied), right axis", COLORS.recommendation, "6 3"]);
    }
    box.append(legend(rateItems));
    box.append(panel("sparkscale-chart-executors", "Executors and load over time", points, x, 300,
      {top: execTop, ticks: execTicks, format: String, title: "executors"},
      {top: rateTop, ticks: rateScale.ticks(5), format: short, title: "rows/s"},
      (svg, yLeft, yRight) => {
        series(svg, "series-arrival", points, x, yRight, arrival, COLORS.arrival, 2, null, false);
        series(svg, "series-processed", points, x, yRight, (p) => p.processed_rate, COLORS.processed, 1.5, "2 3",
          false);
        series(svg, "series-forecast series-forecast-applied", points, x, yRight, forecastApplied, COLORS.forecast,
          2, "6 3", false);
        series(svg, "series-forecast series-forecast-shadow", points, x, yRight, forecastShadow,
          COLORS.recommendation, 1.5, "6 3", false);
        series(svg, "series-target", points, x, yLeft, (p) => p.target, COLORS.target, 2.5, "7 4", true);
        series(svg, "series-live", points, x, yLeft, (p) => p.live, COLORS.live, 2.5, null, true);
      },
      (p) => ["executors: " + intText(p.live) + " live, " + intText(p.target) + " target",
        "arriving: " + fmt(arrival(p)) + " rows/s", "processed: " + fmt(p.processed_rate) + " rows/s",
        ...(isNum(p.forecast_rate) ? ["forecast: " + fmt(p.forecast_rate) + " rows/s"
          + (p.forecast_applied ? " (applied)" : " (shadow)")] : [])],
      decisions, []));

    // Panel 2: backlog (left axis) against utilization per query (right axis), with the target and the
    // scale-up threshold.
    const labels = [];
    for (const p of points) {
      for (const label of Object.keys(p.queries || {})) {
        if (!labels.includes(label) && labels.length < PALETTE.length) {
          labels.push(label);
        }
      }
    }
    // The utilization the executors are sized for, and the one above which the autoscaler scales up.
    const levels = [["target utilization", config.utilization_target, COLORS.arrival],
      ["scale-up threshold", config.utilization_max, COLORS.rollback]].filter((level) => isNum(level[1]));
    const utilizations = points.flatMap((p) => [p.utilization, ...labels.map((l) => (p.queries || {})[l])]);
    const utilTop = Math.max(1.2, Math.ceil(Math.max(...utilizations.filter(isNum)) * 5) / 5);
    const utilStep = utilTop > 4 ? 1 : utilTop > 2 ? 0.5 : 0.2;
    const utilTicks = [];
    for (let v = 0; v <= utilTop + 1e-9; v += utilStep) {
      utilTicks.push(+v.toFixed(2));
    }
    const backlogTop = niceTop(points.map((p) => p.backlog), 10);
    const items = [["backlog (rows)", COLORS.backlog, "", "area"]];
    labels.forEach((label, i) => items.push(["utilization " + label, PALETTE[i], ""]));
    if (labels.length !== 1) {
      items.push(["utilization (application)", "#000000", "5 3"]);
    }
    levels.forEach(([label, , color]) => items.push([label, color, "2 4"]));
    box.append(legend(items));
    box.append(panel("sparkscale-chart-backlog", "Backlog and utilization over time", points, x, 230,
      {top: backlogTop, ticks: d3x.linear().domain([0, backlogTop]).ticks(4), format: short, title: "backlog rows"},
      {top: utilTop, ticks: utilTicks, format: (v) => Math.round(v * 100) + "%", title: "utilization"},
      (svg, yLeft, yRight) => {
        const defined = points.filter((p) => isNum(p.backlog));
        if (defined.length) {
          const area = d3x.area().defined((p) => isNum(p.backlog)).x((p) => x(new Date(p.t * 1000)))
            .y0(yLeft(0)).y1((p) => yLeft(p.backlog));
          svg.append("path").attr("class", "series series-backlog").attr("data-points", defined.length)
            .attr("d", area(points)).attr("fill", COLORS.backlog).attr("fill-opacity", 0.35)
            .attr("stroke", COLORS.backlog).attr("stroke-width", 1.5);
        }
        labels.forEach((label, i) => series(svg, "series-utilization", points, x, yRight,
          (p) => (p.queries || {})[label], PALETTE[i], 2, null, false));
        if (labels.length !== 1) {
          series(svg, "series-utilization-app", points, x, yRight, (p) => p.utilization, "#000000", 1.5, "5 3",
            false);
        }
      },
      (p) => ["backlog: " + fmt(p.backlog) + " rows",
        ...labels.map((l) => "utilization " + cut(l, 24) + ": " + pct((p.queries || {})[l]))],
      decisions, levels));
    return box;
  }

  tab.chart = chart;
})(window.sparkscaleTab = window.sparkscaleTab || {});
