/*
 * Building the page's elements. Everything from the document reaches the page as text (textContent, attributes),
 * never as HTML: query names and reasons are user data.
 */
(function (tab) {
  "use strict";

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

  function section(title, ...children) {
    return [el("h4", {class: "sparkscale-heading"}, title), ...children];
  }

  const muted = (text) => el("span", {class: "text-muted"}, text);

  function table(id, headers, rows, cls) {
    return el("table", {class: "table table-bordered table-sm " + (cls || ""), id},
      el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
      el("tbody", {}, rows));
  }

  Object.assign(tab, {el, section, muted, table});
})(window.sparkscaleTab = window.sparkscaleTab || {});
