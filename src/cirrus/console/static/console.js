// Shared by every console page: the CSRF token, JSON fetches that carry it, and copy buttons.
"use strict";
(function () {
  const meta = document.querySelector('meta[name="cirrus-csrf"]');
  const csrf = meta ? meta.getAttribute("content") : "";

  function withCsrf(init) {
    const options = Object.assign({ credentials: "same-origin" }, init || {});
    options.headers = Object.assign({ "X-Cirrus-CSRF": csrf }, options.headers || {});
    return options;
  }

  async function fetchJSON(url, init) {
    const response = await fetch(url, withCsrf(init));
    if (response.status === 401 && url.startsWith("/console/api/")) {
      window.location.assign("/console/signin");
    }
    return response;
  }

  async function copyText(text, button) {
    try {
      await navigator.clipboard.writeText(text);
      flash(button, "Copied");
    } catch (error) {
      flash(button, "Copy failed");
    }
  }

  function flash(button, label) {
    if (!button) return;
    const before = button.textContent;
    button.textContent = label;
    setTimeout(function () { button.textContent = before; }, 1200);
  }

  // <button data-copy-target="ID"> copies that element's text.
  document.addEventListener("click", function (event) {
    const button = event.target.closest("[data-copy-target]");
    if (!button) return;
    const target = document.getElementById(button.getAttribute("data-copy-target"));
    if (target) copyText(target.textContent, button);
  });

  window.Cirrus = { csrf: csrf, withCsrf: withCsrf, fetchJSON: fetchJSON, copyText: copyText };
})();

// The same formats as cirrus/console/formatting.py, for values updated live.
(function () {
  const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];
  function bytes(size) {
    for (let i = 0; i < UNITS.length; i++) {
      if (Math.abs(size) < 1024 || i === UNITS.length - 1) {
        return i === 0 ? size.toFixed(0) + " B" : size.toFixed(1) + " " + UNITS[i];
      }
      size /= 1024;
    }
    return String(size);
  }
  function format(value, kind) {
    if (value === null || value === undefined) return "–";
    switch (kind) {
      case "bool": return value ? "yes" : "no";
      case "int": return Math.trunc(value).toLocaleString("en-US");
      case "rate": return Number(value).toFixed(1) + "/min";
      case "percent": return (Number(value) * 100).toFixed(1) + "%";
      case "seconds": return value < 1 ? (value * 1000).toFixed(0) + " ms" : Number(value).toFixed(2) + " s";
      case "bytes": return bytes(Number(value));
      default: return String(value);
    }
  }
  function lookup(data, path) {
    return path.split(".").reduce(function (value, key) {
      return value !== null && typeof value === "object" ? value[key] : undefined;
    }, data);
  }
  window.Cirrus.format = format;
  window.Cirrus.lookup = lookup;
})();
