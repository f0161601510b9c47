/*
 * The Autoscaler tab's page, on the driver UI and in the History Server alike. PageFrame.java puts it in Spark's page
 * frame with the document to show (#sparkscale-document: JSON built by TabDocument.java from the autoscaler's
 * listener events; schema $defs/document in autoscaler-tab.schema.json) and d3 from Spark's own static files.
 * Everything from the document reaches the page as text (textContent, attributes), never as HTML: query names and
 * reasons are user data.
 *
 * The live page (data-source="live") fetches itself once per control interval and renders the new document in
 * place; the age of the last tick counts up in between. Three failed fetches in a row (the driver is gone once the
 * application ends) stop it, with a note saying so.
 *
 * d3: Spark 3.5 serves d3 3.x, Spark 4 d3 7.x; the few functions used differ only in name (see `d3x`).
 */
(function () {
  "use strict";

  const root = document.getElementById("sparkscale-page");
  if (!root) {
    return;
  }
  const live = root.dataset.source === "live";

  // ------------------------------------------------------------------ d3 3.x and 7.x

  const d3x = (function (d3) {
    if (!d3 || !d3.select) {
      return null;
    }
    const v3 = !d3.scaleLinear;
    return {
      select: d3.select,
      linear: () => (v3 ? d3.scale.linear() : d3.scaleLinear()),
      time: () => (v3 ? d3.time.scale() : d3.scaleTime()),
      line: (step) => {
        const line = v3 ? d3.svg.line() : d3.line();
        return step ? (v3 ? line.interpolate("step-after") : line.curve(d3.curveStepAfter)) : line;
      },
      area: () => (v3 ? d3.svg.area() : d3.area()),
      axis: (scale, side) => (v3 ? d3.svg.axis().scale(scale).orient(side)
        : {bottom: d3.axisBottom, left: d3.axisLeft, right: d3.axisRight}[side](scale)),
    };
  })(window.d3);

  // ------------------------------------------------------------------ helpers

  const SVG_NS = "http://www.w3.org/2000/svg";
  const COLORS = {
    live: "#1f77b4", target: "#ff7f0e", arrival: "#2ca02c", processed: "#9467bd", backlog: "#969696",
    scale_up: "#2ca02c", scale_down: "#1f77b4", rollback: "#d62728", recommendation: "#7f7f7f",
  };
  const PALETTE = ["#1f77b4", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"];

  /** An element with attributes (class, id, style, title, data-*) and children (nodes, or strings as text). */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined && value !== false) {
        node.setAttribute(key, String(value));
      }
    }
    for (const child of children.flat(Infinity)) {
      if (child !== null && child !== undefined && child !== "") {
        node.append(child instanceof Node ? child : String(child));
      }
    }
    return node;
  }

  const isNum = (v) => typeof v === "number" && isFinite(v);
  const cssName = (text) => String(text).replace(/[^A-Za-z0-9_-]/g, "");
  const DASH = "\u2013";

  function fmt(v) {
    if (!isNum(v)) {
      return DASH;
    }
    const a = Math.abs(v);
    const digits = a >= 100 || Number.isInteger(v) ? 0 : a >= 10 ? 1 : 2;
    return v.toLocaleString("en-US", {minimumFractionDigits: digits, maximumFractionDigits: digits});
  }

  /** Axis labels: 1.5k, 20k, 1.2M. */
  function short(v) {
    const a = Math.abs(v);
    if (a >= 1e6) {
      return +(v / 1e6).toFixed(1) + "M";
    }
    if (a >= 1e3) {
      return +(v / 1e3).toFixed(1) + "k";
    }
    return String(+v.toFixed(2));
  }

  const pct = (v) => (isNum(v) ? Math.round(v * 100) + " %" : DASH);
  const intText = (v) => (isNum(v) ? String(Math.round(v)) : DASH);
  const pad = (n) => String(n).padStart(2, "0");

  function clock(t) {
    if (!isNum(t)) {
      return "";
    }
    const d = new Date(t * 1000);
    return pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }

  function dateClock(t) {
    if (!isNum(t)) {
      return "";
    }
    const d = new Date(t * 1000);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + clock(t);
  }

  function cut(text, limit) {
    text = String(text || "");
    return text.length <= limit ? text : text.slice(0, limit - 1) + "\u2026";
  }

  function section(title, ...children) {
    return [el("h4", {class: "sparkscale-heading"}, title), ...children];
  }

  // ------------------------------------------------------------------ summary

  const MODE_NOTES = {
    autoscale: "decisions are applied",
    recommend: "decisions are published, never applied",
    reactive: "the executor count is held at maxExecutors",
  };

  function item(label, ...content) {
    return el("li", {}, el("strong", {}, label + ":"), " ", ...content);
  }

  const muted = (text) => el("span", {class: "text-muted"}, text);

  function summary(doc, serverMs) {
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

  // ------------------------------------------------------------------ the chart

  const MARGIN = {top: 26, right: 70, bottom: 30, left: 62};

  /** A legend above a panel, in HTML: never over the lines. */
  function legend(items) {
    const box = el("div", {class: "sparkscale-legend"});
    for (const [label, color, dash, kind] of items) {
      const swatch = document.createElementNS(SVG_NS, "svg");
      swatch.setAttribute("width", "28");
      swatch.setAttribute("height", "12");
      const mark = document.createElementNS(SVG_NS, kind === "area" ? "rect" : "line");
      if (kind === "area") {
        for (const [k, v] of Object.entries({x: 1, y: 1, width: 26, height: 10, fill: color, "fill-opacity": 0.35})) {
          mark.setAttribute(k, v);
        }
      } else {
        for (const [k, v] of Object.entries({x1: 1, y1: 6, x2: 27, y2: 6, stroke: color, "stroke-width": 2.5})) {
          mark.setAttribute(k, v);
        }
        if (dash) {
          mark.setAttribute("stroke-dasharray", dash);
        }
      }
      swatch.append(mark);
      box.append(el("span", {class: "sparkscale-legend-item"}, swatch, label));
    }
    return box;
  }

  function timeTicks(scale, span, width) {
    const values = scale.ticks(Math.max(3, Math.floor(width / 130)));
    const format = span > 86400 ? (d) => pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " "
      + pad(d.getHours()) + ":" + pad(d.getMinutes())
      : span > 1200 ? (d) => pad(d.getHours()) + ":" + pad(d.getMinutes()) : (d) => clock(d.getTime() / 1000);
    return {values, format};
  }

  /**
   * One panel: an SVG with a time axis, a left and a right axis, the scaling actions marked, its series, and a
   * readout of the values under the pointer.
   */
  function panel(id, title, points, x, height, left, right, draw, readout, decisions, levels) {
    const width = x.range()[1] + MARGIN.right;
    const svg = d3x.select(document.createElementNS(SVG_NS, "svg"))
      .attr("id", id).attr("class", "sparkscale-chart").attr("width", width).attr("height", height)
      .attr("viewBox", "0 0 " + width + " " + height).attr("role", "img").attr("aria-label", title);
    const bottom = height - MARGIN.bottom;
    const yLeft = d3x.linear().domain([0, left.top]).range([bottom, MARGIN.top]);
    const yRight = d3x.linear().domain([0, right.top]).range([bottom, MARGIN.top]);
    for (const [label, value, color] of levels) { // horizontal levels on the right axis
      svg.append("line").attr("class", "level").attr("data-level", label).attr("x1", x.range()[0])
        .attr("x2", x.range()[1]).attr("y1", yRight(value)).attr("y2", yRight(value)).attr("stroke", color)
        .attr("stroke-width", 1.5).attr("stroke-dasharray", "2 4");
    }
    const grid = svg.append("g").attr("class", "grid");
    for (const v of left.ticks) {
      grid.append("line").attr("x1", x.range()[0]).attr("x2", x.range()[1]).attr("y1", yLeft(v)).attr("y2", yLeft(v));
    }
    const span = (x.domain()[1] - x.domain()[0]) / 1000;
    const t = timeTicks(x, span, x.range()[1] - x.range()[0]);
    svg.append("g").attr("class", "axis axis-time").attr("transform", "translate(0," + bottom + ")")
      .call(d3x.axis(x, "bottom").tickValues(t.values).tickFormat(t.format));
    svg.append("g").attr("class", "axis axis-left").attr("transform", "translate(" + x.range()[0] + ",0)")
      .call(d3x.axis(yLeft, "left").tickValues(left.ticks).tickFormat(left.format));
    svg.append("g").attr("class", "axis axis-right").attr("transform", "translate(" + x.range()[1] + ",0)")
      .call(d3x.axis(yRight, "right").tickValues(right.ticks).tickFormat(right.format));
    const middle = (MARGIN.top + bottom) / 2;
    svg.append("text").attr("class", "axis-title").attr("transform", "translate(16," + middle + ") rotate(-90)")
      .attr("text-anchor", "middle").text(left.title);
    svg.append("text").attr("class", "axis-title")
      .attr("transform", "translate(" + (width - 12) + "," + middle + ") rotate(90)")
      .attr("text-anchor", "middle").text(right.title);
    markers(svg, x, decisions, bottom);
    draw(svg, yLeft, yRight);

    // The values under the pointer: a rule and a box of text, at the nearest point.
    const rule = svg.append("line").attr("class", "hover-rule").attr("y1", MARGIN.top).attr("y2", bottom)
      .style("display", "none");
    const box = svg.append("g").attr("class", "hover-box").style("display", "none");
    const boxRect = box.append("rect").attr("rx", 3);
    const boxText = box.append("text");
    const xs = points.map((p) => x(new Date(p.t * 1000)));
    const overlay = svg.append("rect").attr("class", "hover-area").attr("x", x.range()[0]).attr("y", MARGIN.top)
      .attr("width", x.range()[1] - x.range()[0]).attr("height", bottom - MARGIN.top);
    overlay.node().addEventListener("mousemove", (event) => {
      const bounds = svg.node().getBoundingClientRect();
      const mx = (event.clientX - bounds.left) * (width / bounds.width);
      let i = 0;
      while (i < xs.length - 1 && Math.abs(xs[i + 1] - mx) <= Math.abs(xs[i] - mx)) {
        i++;
      }
      // The actions closer to this point than to its neighbours.
      const lo = i > 0 ? (points[i - 1].t + points[i].t) / 2 : -Infinity;
      const hi = i < points.length - 1 ? (points[i].t + points[i + 1].t) / 2 : Infinity;
      const actions = decisions.filter((d) => d.action !== "none" && d.time > lo && d.time <= hi)
        .map((d) => d.action + " " + intText(d.from_executors) + "\u2192" + intText(d.to_executors)
          + (d.applied ? "" : " (not applied)"));
      const lines = [clock(points[i].t), ...readout(points[i]), ...actions];
      rule.attr("x1", xs[i]).attr("x2", xs[i]).style("display", null);
      boxText.selectAll("tspan").remove();
      lines.forEach((line, n) => boxText.append("tspan").attr("x", 8).attr("dy", n ? 16 : 15).text(line));
      const w = Math.max(...lines.map((line) => line.length)) * 7 + 16;
      const h = lines.length * 16 + 8;
      const bx = xs[i] + 12 + w > x.range()[1] ? xs[i] - 12 - w : xs[i] + 12;
      boxRect.attr("width", w).attr("height", h);
      box.attr("transform", "translate(" + bx + "," + (MARGIN.top + 4) + ")").style("display", null);
    });
    overlay.node().addEventListener("mouseleave", () => {
      rule.style("display", "none");
      box.style("display", "none");
    });
    return svg.node();
  }

  /** Scaling actions as vertical lines, labelled where there is room; hovering one shows its reason. */
  function markers(svg, x, decisions, bottom) {
    const [from, to] = x.domain().map((d) => d.getTime() / 1000);
    let lastLabel = -Infinity;
    for (const d of decisions) {
      if (d.action === "none" || !isNum(d.time) || d.time < from || d.time > to) {
        continue;
      }
      const color = d.applied ? COLORS[d.action] || COLORS.rollback : COLORS.recommendation;
      const px = x(new Date(d.time * 1000));
      const g = svg.append("g").attr("class", "marker marker-" + cssName(d.action)
        + (d.applied ? "" : " marker-recommendation"));
      g.append("title").text(d.action + " " + intText(d.from_executors) + " \u2192 " + intText(d.to_executors)
        + (d.applied ? "" : " (not applied)") + " at " + clock(d.time) + ": " + d.reason);
      g.append("line").attr("x1", px).attr("x2", px).attr("y1", MARGIN.top - 4).attr("y2", bottom)
        .attr("stroke", color).attr("stroke-width", d.applied ? 1.5 : 1)
        .attr("stroke-dasharray", d.applied ? null : "3 3");
      if (px - lastLabel > 56) {
        const symbol = d.action === "scale_up" ? "\u25b2 " : d.action === "scale_down" ? "\u25bc " : "\u21ba ";
        g.append("text").attr("x", px).attr("y", MARGIN.top - 8).attr("text-anchor", "middle").attr("fill", color)
          .attr("class", "marker-label").text(symbol + intText(d.from_executors) + "\u2192"
            + intText(d.to_executors));
        lastLabel = px;
      }
    }
  }

  function series(svg, cls, points, x, y, value, color, width, dash, step) {
    const defined = points.filter((p) => isNum(value(p)));
    if (!defined.length) {
      return;
    }
    const line = d3x.line(step).defined((p) => isNum(value(p)))
      .x((p) => x(new Date(p.t * 1000))).y((p) => y(value(p)));
    svg.append("path").attr("class", "series " + cls).attr("data-points", defined.length)
      .attr("d", line(points)).attr("fill", "none").attr("stroke", color).attr("stroke-width", width)
      .attr("stroke-dasharray", dash || null);
  }

  function niceTop(values, minimum) {
    const top = Math.max(minimum, ...values.filter(isNum));
    return d3x.linear().domain([0, top > 0 ? top : 1]).nice().domain()[1];
  }

  function chart(doc) {
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
    const width = Math.max(640, Math.min(1400, root.clientWidth || 1000));
    // The time axis reaches every action too: the timeline keeps one point per change of figures, so
    // an action at the last tick (a rollback, then the application's end) may come after its last point.
    const actionTimes = decisions.filter((d) => d.action !== "none" && isNum(d.time)).map((d) => d.time);
    const x = d3x.time().domain([new Date(Math.min(points[0].t, ...actionTimes) * 1000),
      new Date(Math.max(points[points.length - 1].t, ...actionTimes) * 1000)])
      .range([MARGIN.left, width - MARGIN.right]);

    // Panel 1: executors (left axis) against the load (right axis): rows arriving per second (processed +
    // backlog growth), Spark's input rate where that is unknown.
    const arrival = points.some((p) => isNum(p.arrival_rate)) ? (p) => p.arrival_rate : (p) => p.input_rate;
    const execTop = Math.max(2, Math.ceil(Math.max(0, ...points.flatMap((p) => [p.live, p.target]).filter(isNum))) + 1);
    const execStep = Math.max(1, Math.ceil(execTop / 6));
    const execTicks = [];
    for (let v = 0; v <= execTop; v += execStep) {
      execTicks.push(v);
    }
    const rateTop = niceTop(points.flatMap((p) => [arrival(p), p.processed_rate]), 1);
    const rateScale = d3x.linear().domain([0, rateTop]);
    box.append(legend([["live executors", COLORS.live, ""], ["target executors", COLORS.target, "7 4"],
      ["arriving rows/s (processed + backlog growth), right axis", COLORS.arrival, ""],
      ["processed rows/s, right axis", COLORS.processed, "2 3"]]));
    box.append(panel("sparkscale-chart-executors", "Executors and load over time", points, x, 300,
      {top: execTop, ticks: execTicks, format: String, title: "executors"},
      {top: rateTop, ticks: rateScale.ticks(5), format: short, title: "rows/s"},
      (svg, yLeft, yRight) => {
        series(svg, "series-arrival", points, x, yRight, arrival, COLORS.arrival, 2, null, false);
        series(svg, "series-processed", points, x, yRight, (p) => p.processed_rate, COLORS.processed, 1.5, "2 3",
          false);
        series(svg, "series-target", points, x, yLeft, (p) => p.target, COLORS.target, 2.5, "7 4", true);
        series(svg, "series-live", points, x, yLeft, (p) => p.live, COLORS.live, 2.5, null, true);
      },
      (p) => ["executors: " + intText(p.live) + " live, " + intText(p.target) + " target",
        "arriving: " + fmt(arrival(p)) + " rows/s", "processed: " + fmt(p.processed_rate) + " rows/s"],
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

  // ------------------------------------------------------------------ tables

  function table(id, headers, rows, cls) {
    return el("table", {class: "table table-bordered table-sm " + (cls || ""), id},
      el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
      el("tbody", {}, rows));
  }

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

  // ------------------------------------------------------------------ the page

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
    root.append(summary(doc, serverMs), ...section("Executors against load", chart(doc)), ...queries(doc),
      ...decisions(doc), ...events(doc));
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
})();
