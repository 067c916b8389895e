// tandem's page: asks POST /v1/ask/stream and renders each trace step as its Server-Sent Event arrives.
"use strict";
const $ = (id) => document.getElementById(id);
let controller = null;

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("key").value || localStorage.getItem("tandem-key") || "";
  if (key) { h.Authorization = "Bearer " + key; localStorage.setItem("tandem-key", key); }
  return h;
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function showValue(value) {
  if (typeof value === "string") return value;
  return JSON.stringify(value, null, 2);
}

function renderStep(step) {
  const li = el("li");
  li.dataset.index = step.index;
  li.appendChild(el("div", "step-name", `${step.index + 1}. ${step.name}`));
  for (const [key, value] of Object.entries(step.notes || {})) {
    const p = el("div", key === "fallbacks" ? "note fallback" : "note");
    p.appendChild(el("b", null, key + ": "));
    p.appendChild(document.createTextNode(showValue(value)));
    li.appendChild(p);
  }
  for (const q of step.queries || []) {
    const p = el("div", "note");
    p.appendChild(el("b", null, "query: "));
    p.appendChild(el("span", "query", q));
    li.appendChild(p);
  }
  if ((step.hits || []).length) {
    const d = el("details");
    d.open = step.name.startsWith("retrieve");
    d.appendChild(el("summary", null, `${step.hits.length} hits`));
    for (const h of step.hits) {
      const div = el("div", "hit");
      div.appendChild(el("span", "title", `#${h.rank} ${h.title || h.doc_id} `));
      const text = h.text || "";
      div.appendChild(el("span", null, `(${Number(h.score).toFixed(3)}) ${text.length > 280 ? text.slice(0, 277) + "…" : text}`));
      d.appendChild(div);
    }
    li.appendChild(d);
  }
  for (const c of step.llm_calls || []) {
    const d = el("details", "call");
    const outcome = c.outcome ? `, ${c.outcome}` : "";
    d.appendChild(el("summary", null,
      `LLM ${c.role}: ${c.prompt_tokens} + ${c.completion_tokens} tokens, ${Number(c.latency_s).toFixed(2)} s${outcome}`));
    d.appendChild(el("pre", "note", c.output));
    li.appendChild(d);
  }
  return li;
}

function showAnswer(result) {
  $("answer").hidden = false;
  $("answer-text").textContent = result.answer || "(no answer)";
  const c = result.cost;
  $("cost").textContent = `${c.llm_calls} LLM calls, ${c.prompt_tokens + c.completion_tokens} tokens, ${c.seconds} s`;
  const cited = $("cited");
  cited.replaceChildren();
  for (const doc of result.cited || []) {
    const li = el("li");
    li.appendChild(el("b", null, (doc.title || doc.id) + ": "));
    li.appendChild(document.createTextNode(doc.text));
    cited.appendChild(li);
  }
  const blob = new Blob([JSON.stringify(result, null, 2)], { type: "application/json" });
  $("download").href = URL.createObjectURL(blob);
}

async function ask(event) {
  event.preventDefault();
  $("steps").replaceChildren();
  $("answer").hidden = true;
  $("status").textContent = "asking…";
  $("go").disabled = true; $("stop").disabled = false;
  controller = new AbortController();
  const body = { question: $("question").value, method: $("method").value || null, index: $("index").value || null };
  try {
    const resp = await fetch("v1/ask/stream", { method: "POST", headers: headers(), body: JSON.stringify(body),
                                                  signal: controller.signal });
    if (!resp.ok) {
      const err = await resp.json().catch(() => ({}));
      throw new Error(`HTTP ${resp.status}: ${(err.error && err.error.message) || (err.detail && JSON.stringify(err.detail)) || ""}`);
    }
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        handle(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
      }
    }
  } catch (err) {
    $("status").textContent = err.name === "AbortError" ? "stopped" : String(err.message || err);
  } finally {
    $("go").disabled = false; $("stop").disabled = true;
  }
}

function handle(block) {
  let kind = "message", data = "";
  for (const line of block.split("\n")) {
    if (line.startsWith("event: ")) kind = line.slice(7);
    else if (line.startsWith("data: ")) data += line.slice(6);
  }
  if (!data) return;
  const payload = JSON.parse(data);
  if (kind === "step") {
    $("steps").appendChild(renderStep(payload));
    $("status").textContent = `step ${payload.index + 1}: ${payload.name}…`;
  } else if (kind === "answer") {
    showAnswer(payload);
    $("status").textContent = "done";
  } else if (kind === "error") {
    $("status").textContent = `error (${payload.status}): ${payload.message}`;
  }
}

async function load() {
  try {
    const [m, i] = await Promise.all([fetch("v1/methods", { headers: headers() }), fetch("v1/indexes", { headers: headers() })]);
    if (!m.ok) { $("status").textContent = m.status === 401 ? "this server needs an API key" : `HTTP ${m.status}`; return; }
    const methods = await m.json(), indexes = await i.json();
    $("method").replaceChildren(...methods.methods.filter((x) => x.served !== false).map((x) => new Option(x.name, x.name, false, x.name === methods.default)));
    $("index").replaceChildren(...indexes.indexes.map((x) => new Option(`${x.name} (${x.documents})`, x.name, false, x.name === indexes.default)));
  } catch (err) {
    $("status").textContent = String(err);
  }
}

$("ask").addEventListener("submit", ask);
$("stop").addEventListener("click", () => controller && controller.abort());
$("key").addEventListener("change", load);
load();
