/*
 * One chart panel and its parts: an SVG with a time axis, a left and a right axis, horizontal levels, the scaling
 * actions marked, its series, and a readout of the values under the pointer. charts.js lays out the page's two
 * panels with these.
 */
(function (tab) {
  "use strict";

  const {d3x, el, isNum, cssName, intText, pad, clock} = tab;

  const SVG_NS = "http://www.w3.org/2000/svg";
  const COLORS = {
    live: "#1f77b4", target: "#ff7f0e", arrival: "#2ca02c", processed: "#9467bd", backlog: "#969696",
    forecast: "#17becf", scale_up: "#2ca02c", scale_down: "#1f77b4", rollback: "#d62728", recommendation: "#7f7f7f",
  };
  const PALETTE = ["#1f77b4", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"];

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

  Object.assign(tab, {COLORS, PALETTE, MARGIN, legend, panel, series, niceTop});
})(window.sparkscaleTab = window.sparkscaleTab || {});
