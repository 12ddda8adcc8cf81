// Playground: the exact request a user would send, over the real API routes, with the session cookie and the
// CSRF header. Model output only ever goes into the page as text (textContent / text nodes), never as HTML.
"use strict";
(function () {
  const root = document.getElementById("playground");
  if (!root) return;
  const baseUrl = root.getAttribute("data-base-url");
  const accountId = root.getAttribute("data-account-id");
  const byId = function (id) { return document.getElementById(id); };
  const RECORD_TRIES = 40;
  const RECORD_WAIT_MS = 250;
  const WEATHER_TOOL = {
    type: "function",
    function: {
      name: "get_weather",
      description: "Get the current weather in a city",
      parameters: {
        type: "object",
        properties: { city: { type: "string", description: "The city, e.g. Paris" } },
        required: ["city"],
      },
    },
  };
  let history = [];
  let busy = false;

  // Tabs

  function showTab(name) {
    ["chat", "embeddings"].forEach(function (tab) {
      byId("tab-" + tab).setAttribute("aria-selected", String(tab === name));
      byId("panel-" + tab).classList.toggle("hidden", tab !== name);
    });
  }
  byId("tab-chat").addEventListener("click", function () { showTab("chat"); });
  byId("tab-embeddings").addEventListener("click", function () { showTab("embeddings"); });

  // Settings

  const temperature = byId("temperature");
  temperature.addEventListener("input", function () { byId("temperature-value").textContent = temperature.value; });
  byId("model").addEventListener("change", function () {
    const option = byId("model").selectedOptions[0];
    if (option) byId("max-tokens").value = option.getAttribute("data-max-tokens");
  });
  byId("clear").addEventListener("click", function () {
    history = [];
    byId("transcript").replaceChildren();
  });

  function requestBody(prompt) {
    const messages = [];
    const system = byId("system").value.trim();
    if (system) messages.push({ role: "system", content: system });
    messages.push.apply(messages, history);
    messages.push({ role: "user", content: prompt });
    const body = {
      model: byId("model").value,
      messages: messages,
      stream: true,
      stream_options: { include_usage: true },
      temperature: Number(temperature.value),
      max_tokens: Number(byId("max-tokens").value) || 256,
    };
    const seed = byId("seed").value.trim();
    if (seed !== "") body.seed = Number(seed);
    if (byId("json-mode").checked) body.response_format = { type: "json_object" };
    if (byId("tools").checked) body.tools = [WEATHER_TOOL];
    return body;
  }

  // "Copy as": the same request from a shell or from Python.

  function pyLiteral(value, indent) {
    const pad = "    ".repeat(indent + 1);
    const end = "    ".repeat(indent);
    if (value === null || value === undefined) return "None";
    if (value === true) return "True";
    if (value === false) return "False";
    if (typeof value === "number") return String(value);
    if (typeof value === "string") return JSON.stringify(value);
    if (Array.isArray(value)) {
      if (value.length === 0) return "[]";
      return "[\n" + value.map(function (item) { return pad + pyLiteral(item, indent + 1); }).join(",\n") + ",\n" + end + "]";
    }
    const keys = Object.keys(value);
    if (keys.length === 0) return "{}";
    return "{\n" + keys.map(function (key) {
      return pad + JSON.stringify(key) + ": " + pyLiteral(value[key], indent + 1);
    }).join(",\n") + ",\n" + end + "}";
  }

  function keywordArguments(body, skip) {
    return Object.keys(body).filter(function (key) { return skip.indexOf(key) < 0; }).map(function (key) {
      return "    " + key + "=" + pyLiteral(body[key], 1) + ",";
    }).join("\n");
  }

  function asCurl(body) {
    const json = JSON.stringify(body, null, 2).replace(/'/g, "'\\''");
    return "curl -N " + baseUrl + "/v1/chat/completions \\\n" +
      "  -H \"Authorization: Bearer $CIRRUS_API_TOKEN\" \\\n" +
      "  -H \"Content-Type: application/json\" \\\n" +
      "  -d '" + json + "'";
  }

  function asOpenAI(body) {
    return "import os\n\nfrom openai import OpenAI\n\n" +
      "client = OpenAI(base_url=" + JSON.stringify(baseUrl + "/v1") + ", api_key=os.environ[\"CIRRUS_API_TOKEN\"])\n" +
      "stream = client.chat.completions.create(\n" + keywordArguments(body, []) + "\n)\n" +
      "for chunk in stream:\n" +
      "    if chunk.choices and chunk.choices[0].delta.content:\n" +
      "        print(chunk.choices[0].delta.content, end=\"\", flush=True)\n";
  }

  function asCloudflare(body) {
    // Workers AI's route takes the same messages and options; it answers whole here (a streamed JSON-mode
    // answer is refused there, as Workers AI documents).
    return "import os\n\nfrom cloudflare import Cloudflare\n\n" +
      "client = Cloudflare(api_token=os.environ[\"CIRRUS_API_TOKEN\"], base_url=" + JSON.stringify(baseUrl + "/client/v4") + ")\n" +
      "result = client.ai.run(\n    " + JSON.stringify(body.model) + ",\n    account_id=" + JSON.stringify(accountId) + ",\n" +
      keywordArguments(body, ["model", "stream", "stream_options"]) + "\n)\nprint(result)\n";
  }

  const SNIPPETS = { curl: asCurl, openai: asOpenAI, cloudflare: asCloudflare };
  const SNIPPET_LABELS = { curl: "curl", cloudflare: "Python cloudflare", openai: "Python openai" };

  // The transcript

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function addUserTurn(prompt) {
    const turn = element("div", "turn user");
    turn.append(element("div", "role", "You"), element("div", "text", prompt));
    byId("transcript").appendChild(turn);
  }

  function addAssistantTurn(body) {
    const turn = element("div", "turn assistant");
    turn.setAttribute("data-state", "waiting");
    const reasoning = element("div", "reasoning hidden");
    const text = element("div", "text");
    const textNode = document.createTextNode("");
    text.appendChild(textNode);
    const reasoningNode = document.createTextNode("");
    reasoning.appendChild(reasoningNode);
    const tools = element("div", "tool-calls hidden");
    const figures = element("div", "figures");
    const copy = element("div", "copyas");
    const snippet = element("pre", "snippet hidden");
    copy.appendChild(element("span", "muted", "Copy as"));
    Object.keys(SNIPPET_LABELS).forEach(function (kind) {
      const button = element("button", "secondary", SNIPPET_LABELS[kind]);
      button.type = "button";
      button.setAttribute("data-snippet", kind);
      button.addEventListener("click", function () {
        snippet.textContent = SNIPPETS[kind](body);
        snippet.classList.remove("hidden");
        window.Cirrus.copyText(snippet.textContent, button);
      });
      copy.appendChild(button);
    });
    turn.append(element("div", "role", body.model), reasoning, text, tools, figures, copy, snippet);
    byId("transcript").appendChild(turn);
    return {
      turn: turn, text: text, textNode: textNode, reasoning: reasoning, reasoningNode: reasoningNode,
      tools: tools, figures: figures,
    };
  }

  function figure(view, name, label, value) {
    let item = view.figures.querySelector('[data-figure="' + name + '"]');
    if (!item) {
      item = element("span");
      item.setAttribute("data-figure", name);
      item.append(element("span", "", label + " "), element("b"));
      view.figures.appendChild(item);
    }
    item.querySelector("b").textContent = value;
  }

  function showError(view, message) {
    view.turn.setAttribute("data-state", "error");
    const error = element("div", "error", message);
    error.setAttribute("role", "alert");
    view.turn.insertBefore(error, view.figures);
  }

  // Streaming

  function streamState() {
    return { firstTokenAt: null, usage: null, content: "", toolCalls: [], error: null };
  }

  function applyChunk(view, state, chunk) {
    if (chunk.error) {
      state.error = chunk.error.message || JSON.stringify(chunk.error);
      return;
    }
    if (chunk.usage) state.usage = chunk.usage;
    (chunk.choices || []).forEach(function (choice) {
      const delta = choice.delta || {};
      if (delta.reasoning_content) {
        if (state.firstTokenAt === null) state.firstTokenAt = performance.now();
        view.reasoning.classList.remove("hidden");
        view.reasoningNode.appendData(delta.reasoning_content);
      }
      if (delta.content) {
        if (state.firstTokenAt === null) state.firstTokenAt = performance.now();
        state.content += delta.content;
        view.textNode.appendData(delta.content);
        view.turn.setAttribute("data-state", "streaming");
      }
      (delta.tool_calls || []).forEach(function (call) {
        if (state.firstTokenAt === null) state.firstTokenAt = performance.now();
        const index = call.index || 0;
        const known = state.toolCalls[index] || (state.toolCalls[index] = { name: "", arguments: "" });
        if (call.function && call.function.name) known.name += call.function.name;
        if (call.function && call.function.arguments) known.arguments += call.function.arguments;
        view.tools.classList.remove("hidden");
        view.tools.textContent = state.toolCalls.map(function (c) { return c.name + "(" + c.arguments + ")"; }).join("\n");
      });
    });
  }

  function applyEvent(view, state, event) {
    const data = event.split("\n").filter(function (line) { return line.indexOf("data:") === 0; })
      .map(function (line) { return line.slice(5).trim(); }).join("\n");
    if (!data || data === "[DONE]") return;
    applyChunk(view, state, JSON.parse(data));
  }

  async function readStream(response, view, state) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const next = await reader.read();
      if (next.done) break;
      buffer += decoder.decode(next.value, { stream: true }).replace(/\r\n/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        applyEvent(view, state, buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
      }
    }
    if (buffer.trim()) applyEvent(view, state, buffer);
  }

  async function errorMessage(response) {
    const text = await response.text();
    try {
      const body = JSON.parse(text);
      if (body.error && body.error.message) return body.error.message;
      if (body.errors && body.errors[0]) return body.errors[0].message;
    } catch (ignored) { /* not JSON: show the text */ }
    return "HTTP " + response.status + ": " + text.slice(0, 300);
  }

  function showFigures(view, state, started, ended, response) {
    const usage = state.usage || {};
    const completion = usage.completion_tokens;
    const cached = usage.prompt_tokens_details ? usage.prompt_tokens_details.cached_tokens : undefined;
    const ttft = state.firstTokenAt === null ? null : (state.firstTokenAt - started) / 1000;
    const generating = state.firstTokenAt === null ? 0 : (ended - state.firstTokenAt) / 1000;
    figure(view, "ttft", "TTFT", window.Cirrus.format(ttft, "seconds"));
    figure(view, "tokens-per-second", "tokens/s",
      completion > 1 && generating > 0 ? ((completion - 1) / generating).toFixed(1) : "–");
    figure(view, "prompt-tokens", "prompt", window.Cirrus.format(usage.prompt_tokens, "int"));
    figure(view, "cached-tokens", "cached", window.Cirrus.format(cached, "int"));
    figure(view, "completion-tokens", "completion", window.Cirrus.format(completion, "int"));
    figure(view, "neurons", "neurons", "…");
    figure(view, "cost", "cost", "…");
    figure(view, "cache-status", "cache", response.headers.get("cf-aig-cache-status") || "–");
    figure(view, "request-id", "request id", response.headers.get("x-request-id") || "–");
  }

  function sleep(ms) { return new Promise(function (resolve) { setTimeout(resolve, ms); }); }

  async function showCost(view, requestId) {
    for (let attempt = 0; attempt < RECORD_TRIES; attempt++) {
      const response = await window.Cirrus.fetchJSON("/console/api/playground/records/" + encodeURIComponent(requestId));
      if (response.ok) {
        const records = (await response.json()).records;
        if (records.length > 0) {
          const neurons = records.reduce(function (sum, r) { return sum + r.neurons; }, 0);
          const cost = records.reduce(function (sum, r) { return sum + r.cost_usd; }, 0);
          figure(view, "neurons", "neurons", neurons.toFixed(3));
          figure(view, "cost", "cost", "$" + cost.toFixed(8));
          view.turn.setAttribute("data-metered", "yes");
          return;
        }
      }
      await sleep(RECORD_WAIT_MS);
    }
    figure(view, "neurons", "neurons", "not metered yet");
    figure(view, "cost", "cost", "–");
  }

  async function send(prompt) {
    const body = requestBody(prompt);
    addUserTurn(prompt);
    const view = addAssistantTurn(body);
    const state = streamState();
    const started = performance.now();
    let response;
    try {
      response = await fetch("/v1/chat/completions", window.Cirrus.withCsrf({
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
      }));
      if (!response.ok) {
        showError(view, await errorMessage(response));
        return;
      }
      await readStream(response, view, state);
    } catch (error) {
      showError(view, "The request failed: " + error.message);
      return;
    }
    const ended = performance.now();
    showFigures(view, state, started, ended, response);
    if (state.error) {
      showError(view, state.error);
    } else {
      view.turn.setAttribute("data-state", "done");
      history.push({ role: "user", content: prompt });
      if (state.content) history.push({ role: "assistant", content: state.content });
    }
    const requestId = response.headers.get("x-request-id");
    if (requestId) await showCost(view, requestId);
  }

  byId("composer").addEventListener("submit", async function (event) {
    event.preventDefault();
    const prompt = byId("prompt").value.trim();
    if (!prompt || busy) return;
    busy = true;
    byId("send").disabled = true;
    byId("prompt").value = "";
    try {
      await send(prompt);
    } finally {
      busy = false;
      byId("send").disabled = false;
    }
  });
  byId("prompt").addEventListener("keydown", function (event) {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      byId("composer").requestSubmit();
    }
  });

  // Embeddings: cosine similarity, computed here from /v1/embeddings.

  function cosine(a, b) {
    let dot = 0, na = 0, nb = 0;
    for (let i = 0; i < a.length; i++) { dot += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
    return na && nb ? dot / Math.sqrt(na * nb) : 0;
  }

  function renderMatrix(texts, vectors) {
    const table = byId("similarity");
    table.replaceChildren();
    const head = element("tr");
    head.appendChild(element("th"));
    texts.forEach(function (_, i) { head.appendChild(element("th", "", "#" + (i + 1))); });
    table.appendChild(head);
    texts.forEach(function (text, i) {
      const row = element("tr");
      const label = element("th", "", "#" + (i + 1) + " " + (text.length > 40 ? text.slice(0, 40) + "…" : text));
      label.title = text;
      row.appendChild(label);
      vectors.forEach(function (_, j) {
        const similarity = cosine(vectors[i], vectors[j]);
        const cell = element("td", "", similarity.toFixed(3));
        cell.setAttribute("data-similarity", similarity.toFixed(6));
        cell.style.backgroundColor = "rgba(243, 128, 32, " + Math.max(0, similarity).toFixed(3) + ")";
        row.appendChild(cell);
      });
      table.appendChild(row);
    });
  }

  const embed = byId("embed");
  if (embed) {
    embed.addEventListener("click", async function () {
      const error = byId("embedding-error");
      error.classList.add("hidden");
      const texts = byId("embedding-texts").value.split("\n").map(function (t) { return t.trim(); }).filter(Boolean);
      if (texts.length < 2) {
        error.textContent = "Give at least two texts, one per line.";
        error.classList.remove("hidden");
        return;
      }
      embed.disabled = true;
      try {
        const response = await fetch("/v1/embeddings", window.Cirrus.withCsrf({
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ model: byId("embedding-model").value, input: texts }),
        }));
        if (!response.ok) throw new Error(await errorMessage(response));
        const data = (await response.json()).data.slice().sort(function (a, b) { return a.index - b.index; });
        renderMatrix(texts, data.map(function (item) { return item.embedding; }));
      } catch (failure) {
        error.textContent = failure.message;
        error.classList.remove("hidden");
      } finally {
        embed.disabled = false;
      }
    });
  }
})();
