/*
 * The d3 functions the charts use, under one name for either d3 Spark serves from its static files: Spark 3.5
 * has d3 3.x, Spark 4 d3 7.x, and the few functions used differ only in name. Null when d3 did not load (the
 * page then says so in place of the charts).
 */
(function (tab) {
  "use strict";

  tab.d3x = (function (d3) {
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
})(window.sparkscaleTab = window.sparkscaleTab || {});
