// Overview: poll /console/api/overview every 2 s; write the numbers, memory bars and instances as text.
"use strict";
(function () {
  const POLL_MS = 2000;
  const format = window.Cirrus.format;

  function cell(row, text, numeric) {
    const td = document.createElement("td");
    td.textContent = text;
    if (numeric) td.className = "num";
    row.appendChild(td);
  }

  function applyMeters(root) {
    root.querySelectorAll(".meter > span[data-share]").forEach(function (bar) {
      const share = Math.max(0, Math.min(1, Number(bar.getAttribute("data-share")) || 0));
      bar.style.width = (share * 100).toFixed(1) + "%";
    });
  }

  function renderFields(overview) {
    document.querySelectorAll("[data-field]").forEach(function (element) {
      const value = window.Cirrus.lookup(overview, element.getAttribute("data-field"));
      element.textContent = format(value, element.getAttribute("data-format"));
    });
  }

  function renderMemory(nodes) {
    const container = document.getElementById("memory");
    if (!container) return;
    container.replaceChildren();
    nodes.forEach(function (node) {
      const wrapper = document.createElement("div");
      wrapper.className = "node-memory";
      const line = document.createElement("div");
      const name = document.createElement("b");
      name.textContent = node.node_id;
      const figures = document.createElement("span");
      figures.className = "muted";
      figures.textContent = " " + format(node.used_bytes, "bytes") + " of " + format(node.budget_bytes, "bytes");
      line.append(name, figures);
      const meter = document.createElement("div");
      meter.className = "meter";
      const bar = document.createElement("span");
      bar.setAttribute("data-share", node.budget_bytes ? node.used_bytes / node.budget_bytes : 0);
      meter.appendChild(bar);
      wrapper.append(line, meter);
      container.appendChild(wrapper);
    });
    applyMeters(container);
  }

  function renderInstances(groups) {
    const body = document.querySelector("#instances tbody");
    if (!body) return;
    body.replaceChildren();
    if (groups.length === 0) {
      const row = document.createElement("tr");
      row.className = "empty";
      const td = document.createElement("td");
      td.colSpan = 5;
      td.className = "muted";
      td.textContent = "No instance is loaded. The first request to a model starts one.";
      row.appendChild(td);
      body.appendChild(row);
      return;
    }
    groups.forEach(function (group) {
      const row = document.createElement("tr");
      cell(row, group.model);
      cell(row, group.state);
      cell(row, String(group.count), true);
      cell(row, format(group.memory_bytes, "bytes"), true);
      cell(row, group.active_requests + " / " + group.slots, true);
      body.appendChild(row);
    });
  }

  async function refresh() {
    try {
      const response = await window.Cirrus.fetchJSON("/console/api/overview");
      if (!response.ok) throw new Error("HTTP " + response.status);
      const overview = await response.json();
      renderFields(overview);
      if (overview.node) {
        renderMemory(overview.node.nodes);
        renderInstances(overview.node.instances);
      }
      document.getElementById("updated").textContent = "Updated " + new Date().toLocaleTimeString() + "; every 2 seconds.";
    } catch (error) {
      document.getElementById("updated").textContent = "Could not update: " + error.message;
    } finally {
      setTimeout(refresh, POLL_MS);
    }
  }

  applyMeters(document);
  setTimeout(refresh, POLL_MS);
})();
