/*
 * Text for figures and times, shared by every part of the Autoscaler tab's page. Each file of the page's script
 * adds what it offers to one namespace, window.sparkscaleTab, and takes what it needs from the files before it
 * (PageFrame.java inlines them in its declared order; no bundler, no network).
 */
(function (tab) {
  "use strict";

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

  Object.assign(tab, {isNum, cssName, DASH, fmt, short, pct, intText, pad, clock, dateClock, cut});
})(window.sparkscaleTab = window.sparkscaleTab || {});
