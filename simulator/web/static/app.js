// clustersim serve: the what-if page. Plain JavaScript, no build step, no network but this server.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));
const MAX_UPLOAD = 1000000;
const MAX_PINS = 4;
const COLORS = {compute: "#4c78a8", tp: "#f58518", cp: "#e45756", ep: "#b279a2", pp: "#72b7b2",
  dp: "#54a24b", host: "#9d755d", bubble: "#bab0ac", variability: "#eeca3b"};
const ORDER = ["compute", "tp", "cp", "ep", "pp", "dp", "host", "bubble", "variability"];
const ordered = (b) => Object.entries(b).sort((x, y) => ORDER.indexOf(x[0]) - ORDER.indexOf(y[0]));
const MEM_COLORS = {parameters: "#4c78a8", fp8_weight_copies: "#9ecae9", gradients: "#f58518",
  optimizer: "#e45756", activations: "#54a24b", comm_buffers: "#b279a2", framework: "#9d755d"};

const state = {
  workload: "llama3-70b", topology: "dgx-h100",
  uploads: {workload: null, topology: null},   // {name, text} of an uploaded document
  overrides: {}, topologyOverrides: {},        // only the fields the user changed
  last: null, seq: 0, pins: [], shipped: null,
};

// ---------- small helpers ----------
function fmt(x, digits = 4) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  if (Math.abs(x) >= 1e6) return x.toExponential(3);
  return Number(x.toPrecision(digits)).toLocaleString("en-US", {maximumFractionDigits: 6});
}
function seconds(s) {
  if (s === null || s === undefined) return "–";
  if (s >= 1) return s.toFixed(3) + " s";
  if (s >= 1e-3) return (s * 1e3).toFixed(2) + " ms";
  return (s * 1e6).toFixed(1) + " µs";
}
const pct = (x) => (x === null || x === undefined) ? "–" : (x * 100).toFixed(1) + " %";
function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const kid of kids) e.append(kid);
  return e;
}
function svg(tag, attrs = {}) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}
// A field's text as the CLI's `--set FIELD=TEXT` reads it (a YAML scalar), or undefined.
function scalar(text) {
  const t = text.trim();
  if (t === "") return null;
  if (/^[-+]?\d+$/.test(t)) return parseInt(t, 10);
  if (/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(t)) return parseFloat(t);
  if (t === "true" || t === "false") return t === "true";
  if (t === "null" || t === "~") return null;
  return t;
}
function yamlScalar(v) {
  if (v === null) return "null";
  if (typeof v === "string" && /^[A-Za-z0-9_.+-]+$/.test(v)) return v;
  return typeof v === "string" ? JSON.stringify(v) : String(v);
}
const ref = (kind, cfg = state) => (cfg.uploads[kind] ? cfg.uploads[kind].text : cfg[kind]);
const refName = (kind, cfg = state) => (cfg.uploads[kind] ? cfg.uploads[kind].name : cfg[kind]);
function request(cfg = state) {
  return {workload: ref("workload", cfg), topology: ref("topology", cfg),
    overrides: cfg.overrides, topology_overrides: cfg.topologyOverrides};
}
async function post(url, body) {
  const r = await fetch(url, {method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify(body)});
  let data = null;
  try { data = await r.json(); } catch (e) { data = {error: `HTTP ${r.status}`}; }
  return {ok: r.ok, status: r.status, data};
}
function busy(on) { const s = $("#status"); s.textContent = on ? "simulating…" : "ready"; s.classList.toggle("busy", on); }

// ---------- the URL carries the configuration ----------
function writeHash() {
  const p = new URLSearchParams();
  p.set("w", refName("workload")); p.set("t", refName("topology"));
  if (Object.keys(state.overrides).length) p.set("o", JSON.stringify(state.overrides));
  if (Object.keys(state.topologyOverrides).length) p.set("to", JSON.stringify(state.topologyOverrides));
  history.replaceState(null, "", "#" + p.toString());
}
function readHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  try {
    if (p.get("w")) state.workload = p.get("w");
    if (p.get("t")) state.topology = p.get("t");
    state.overrides = p.get("o") ? JSON.parse(p.get("o")) : {};
    state.topologyOverrides = p.get("to") ? JSON.parse(p.get("to")) : {};
  } catch (e) { state.overrides = {}; state.topologyOverrides = {}; }
}

// ---------- the editor ----------
function fieldInputs() { return $$("[data-path]"); }
function overridesOf(input) { return input.dataset.topology ? state.topologyOverrides : state.overrides; }
function fieldValue(input) {
  if (input.tagName === "SELECT") return scalar(input.value);
  return scalar(input.value);
}
function onFieldEdit(ev) {
  const input = ev.target;
  overridesOf(input)[input.dataset.path] = fieldValue(input);
  input.classList.add("changed");
  schedule();
}
let timer = null;
function schedule(delay = 250) { clearTimeout(timer); timer = setTimeout(refresh, delay); }

function fillFields(fields) {
  for (const input of fieldInputs()) {
    const key = (input.dataset.topology ? "topology:" : "") + input.dataset.path;
    const changed = input.dataset.path in overridesOf(input);
    input.classList.toggle("changed", changed);
    if (changed || document.activeElement === input) continue;
    const v = fields[key];
    if (input.tagName === "SELECT") input.value = v === null || v === undefined ? "" : String(v);
    else input.value = v === null || v === undefined ? "" : String(v);
  }
}
function syncFromOverrides() {  // URL or a loaded row: show the overridden values
  for (const input of fieldInputs()) {
    const o = overridesOf(input);
    if (input.dataset.path in o) {
      const v = o[input.dataset.path];
      input.value = v === null ? "" : String(v);
    }
  }
}
function clearErrors() {
  $$(".err").forEach((e) => { e.textContent = ""; });
  $$(".invalid").forEach((e) => e.classList.remove("invalid"));
  $("#banner").hidden = true;
}
function showError(data) {
  const msg = data.error || "error";
  const field = data.field || "";
  let input = fieldInputs().find((i) => i.dataset.path === field);
  const slot = input ? input.parentElement.querySelector(".err") : $(`[data-err="${CSS.escape(field)}"]`);
  if (slot) {
    slot.textContent = msg;
    if (input) input.classList.add("invalid");
  } else {
    const b = $("#banner"); b.textContent = msg; b.hidden = false;
  }
  $("#tab-editor .results").classList.add("stale");
}

async function refresh() {
  writeHash();
  const seq = ++state.seq;
  busy(true);
  const res = await post("/api/detail", request());
  if (seq !== state.seq) return;  // a newer edit is on its way
  busy(false);
  clearErrors();
  if (!res.ok) { showError(res.data); fillBase(); return; }
  state.last = res.data;
  state.fieldsFor = configKey();
  $("#tab-editor .results").classList.remove("stale");
  render(res.data);
}

const configKey = () => JSON.stringify([ref("workload"), ref("topology")]);
// After an error, the boxes that were not edited still show the document's own values:
// those of the configuration without the edits (one more request, when it changed).
async function fillBase() {
  const key = configKey();
  if (state.fieldsFor === key) return;
  const res = await post("/api/detail", {workload: ref("workload"), topology: ref("topology")});
  if (!res.ok || key !== configKey()) return;
  state.fieldsFor = key;
  fillFields(res.data.fields);
  fillLabels(res.data);
}
function fillLabels(d) {
  $("#f-dispatcher").disabled = !d.moe;
  $("#f-dispatcher").title = d.moe ? "" : "dense model: no MoE dispatcher";
  $("#l-bw0").textContent = `${d.tiers[0] || "tier 0"} GB/s`;
  $("#l-bw1").textContent = `${d.tiers[1] || "tier 1"} GB/s`;
}

function render(d) {
  const r = d.result;
  fillFields(d.fields);
  const p = r.plan;
  $("#gpus").textContent = `GPUs: ${r.num_gpus} = TP${p.tp} × PP${p.pp} × CP${p.cp} × DP${p.dp}` + (p.ep > 1 ? ` (EP${p.ep})` : "");
  fillLabels(d);
  const st = $("#step-time");
  st.textContent = seconds(r.step_time_s); st.dataset.seconds = String(r.step_time_s);
  const iv = r.step_time_interval_s;
  $("#step-interval").textContent = iv && iv.low !== null ?
    `${seconds(iv.low)} – ${seconds(iv.high)} (${Math.round(r.interval_coverage * 100)} % interval)` : "no interval for this case";
  $("#tokens").textContent = fmt(r.tokens_per_s);
  $("#tokens-gpu").textContent = `${fmt(r.tokens_per_s / r.num_gpus)} per GPU · ${fmt(r.model_tflops_per_gpu)} TFLOP/s/GPU`;
  $("#mfu").textContent = pct(r.mfu);
  $("#hfu").textContent = `HFU ${pct(r.hfu)} · bubble ${pct(r.bubble_fraction)}`;
  $("#mem").textContent = `${r.memory_per_gpu_GB.toFixed(1)} GB`;
  $("#mem-cap").textContent = `of ${d.capacity_GB.toFixed(1)} GB · ${r.fits_in_memory ? "fits" : "does not fit"}`;
  $("#mem-card").classList.toggle("bad", !r.fits_in_memory);
  $("#plan-label").textContent = `${r.workload} on ${r.topology}, ${p.schedule}, MBS ${p.mbs}, GBS ${p.gbs}, ${p.precision}, recompute ${p.recompute_detail || p.recompute}${p.peft === "lora" ? ", LoRA" : ""}${p.packed_document_length ? `, packed ${p.packed_document_length}-token documents` : ""}`;
  renderBreakdown(r);
  renderMemory(d);
  renderTimeline(d.timeline);
  const notes = $("#notes"); notes.replaceChildren();
  for (const n of r.notes) notes.append(el("li", {text: n}));
  if (!r.notes.length) notes.append(el("li", {class: "hint", text: "none"}));
  const changed = [...Object.entries(state.overrides), ...Object.entries(state.topologyOverrides)];
  $("#changed").textContent = changed.length ? "changed: " + changed.map(([k, v]) => `${k}=${yamlScalar(v)}`).join(", ") : "";
}

function breakdownLabel(k) {
  return {compute: "compute", bubble: "pipeline bubble", variability: "wait for slow peers",
    host: "host launch stall"}[k] || `exposed ${k.toUpperCase()} comm`;
}
// Result.fsdp_breakdown_s (simulator/workload/fsdp.py FSDP_KEYS), as `clustersim run` prints it
const FSDP_LABELS = {exposed_collectives: "collectives exposed", copy_kernels: "copy kernels",
  overlap_slowdown: "overlap slowdown"};
function renderBreakdown(r) {
  const box = $("#breakdown"); box.replaceChildren();
  const max = Math.max(...Object.values(r.breakdown_s), 1e-12);
  for (const [k, v] of Object.entries(r.breakdown_s).sort((a, b) => b[1] - a[1])) {
    if (v <= 0 && k !== "compute") continue;
    const fill = el("div", {class: "fill"}); fill.style.width = `${(v / max) * 100}%`; fill.style.background = COLORS[k] || "#888";
    box.append(el("div", {class: "hbar"}, el("span", {text: breakdownLabel(k)}),
      el("div", {class: "track"}, fill), el("span", {class: "num", text: `${seconds(v)} · ${(v / r.step_time_s * 100).toFixed(1)} %`})));
  }
  const fsdp = Object.entries(r.fsdp_breakdown_s || {});
  if (fsdp.length) {  // what the exposed DP time of an FSDP step is made of
    box.append(el("div", {class: "hint", id: "fsdp-split", text: "FSDP, of the exposed DP time: "
      + fsdp.map(([k, v]) => `${FSDP_LABELS[k] || k} ${seconds(v)}`).join(", ")}));
  }
}
function renderMemory(d) {
  const box = $("#memory"); box.replaceChildren();
  const stages = d.memory_stages;
  const max = 1.06 * Math.max(d.capacity_GB, ...stages.map((s) => s.total_GB));  // room for the capacity tick
  const shown = stages.length > 16 ? stages.filter((s, i) => i < 8 || i >= stages.length - 8) : stages;
  for (const s of shown) {
    const track = el("div", {class: "track"}); track.style.position = "relative";
    for (const k of Object.keys(MEM_COLORS)) {
      if (!s[k]) continue;
      const f = el("div", {class: "fill", title: `${k}: ${s[k].toFixed(2)} GB`});
      f.style.width = `${(s[k] / max) * 100}%`; f.style.background = MEM_COLORS[k]; track.append(f);
    }
    const cap = el("div"); cap.style.cssText = `position:absolute;left:${(d.capacity_GB / max) * 100}%;top:-2px;bottom:-2px;width:2px;background:#1d2330`;
    track.append(cap);
    const over = s.total_GB > d.capacity_GB;
    const num = el("span", {class: "num", text: `${s.total_GB.toFixed(1)} / ${d.capacity_GB.toFixed(1)} GB`});
    if (over) num.style.color = "var(--bad)";
    box.append(el("div", {class: "hbar mem"}, el("span", {text: `stage ${s.stage}`}), track, num));
  }
  const legend = el("div", {class: "legend"});
  for (const [k, c] of Object.entries(MEM_COLORS)) {
    const i = el("i"); i.style.background = c; legend.append(el("span", {}, i, k.replace(/_/g, " ")));
  }
  const i = el("i"); i.style.background = "#1d2330"; i.style.width = "2px";
  legend.append(el("span", {}, i, "capacity"));
  box.append(legend);
}
function lighten(hex, f) {
  const n = parseInt(hex.slice(1), 16);
  const c = [n >> 16, (n >> 8) & 255, n & 255].map((x) => Math.round(x + (255 - x) * f));
  return `rgb(${c.join(",")})`;
}
function renderTimeline(tl) {
  const box = $("#timeline"); box.replaceChildren();
  if (!tl.spans.length) { box.append(el("div", {class: "empty", text: tl.note || "no timeline"})); return; }
  const W = Math.max(480, Math.round(box.clientWidth || 1000)), left = 64, right = 12, rowH = 22, top = 6;
  const H = top + tl.stages * rowH + 26;
  const end = Math.max(tl.step_s, ...tl.spans.map((s) => s[5]));
  const x = (t) => left + (t / end) * (W - left - right);
  const g = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "pipeline timeline"});
  const chunks = Math.max(1, ...tl.spans.map((s) => s[2] + 1));
  const base = {F: "#4c78a8", B: "#59a14f", W: "#6a3d9a", O: "#9aa0a6"};
  for (let s = 0; s < tl.stages; s++) {
    g.append(svg("rect", {x: left, y: top + s * rowH + 2, width: W - left - right, height: rowH - 4, fill: "#f3f5f8"}));
    const t = svg("text", {x: left - 8, y: top + s * rowH + rowH / 2 + 4, "text-anchor": "end", "font-size": 11, fill: "#697386"});
    t.textContent = `stage ${s}`; g.append(t);
  }
  for (const [stage, kind, chunk, mb, start, stop] of tl.spans) {
    const color = chunks > 1 && kind !== "O" ? lighten(base[kind] || "#59a14f", 0.55 * chunk / (chunks - 1)) : (base[kind] || "#59a14f");
    const r = svg("rect", {x: x(start), y: top + stage * rowH + 3, width: Math.max(0.6, x(stop) - x(start)), height: rowH - 6, fill: color});
    const tip = svg("title"); tip.textContent = `${kind} mb ${mb + 1} chunk ${chunk} · ${seconds(start)}–${seconds(stop)}`;
    r.append(tip); g.append(r);
  }
  const yAxis = top + tl.stages * rowH + 4;
  const [scale, unit] = end >= 1 ? [1, "s"] : end >= 1e-3 ? [1e3, "ms"] : [1e6, "µs"];
  for (let i = 0; i <= 5; i++) {
    const t = (end * i) / 5;
    g.append(svg("line", {x1: x(t), x2: x(t), y1: top, y2: yAxis, stroke: "#d5dae2", "stroke-width": 0.6}));
    const lab = svg("text", {x: x(t), y: yAxis + 14, "text-anchor": i === 5 ? "end" : "middle", "font-size": 11, fill: "#697386"});
    lab.textContent = `${Number((t * scale).toPrecision(3))} ${unit}`; g.append(lab);
  }
  g.append(svg("line", {x1: x(tl.step_s), x2: x(tl.step_s), y1: top, y2: yAxis, stroke: "#1d2330", "stroke-dasharray": "4 3"}));
  box.append(g);
}

// ---------- uploads ----------
function upload(kind, input) {
  const file = input.files[0];
  if (!file) return;
  const slot = $(`[data-err="${kind}"]`);
  if (file.size > MAX_UPLOAD) { slot.textContent = `${file.name}: larger than 1 MB; a configuration is a few kB`; return; }
  file.text().then((text) => {
    state.uploads[kind] = {name: file.name, text};
    const sel = $("#" + kind);
    let opt = $$("option", sel).find((o) => o.value === "__upload__");
    if (!opt) { opt = el("option", {value: "__upload__"}); sel.prepend(opt); }
    opt.textContent = `uploaded: ${file.name}`; sel.value = "__upload__";
    if (kind === "workload") state.overrides = {}; else state.topologyOverrides = {};
    fieldInputs().forEach((i) => i.classList.remove("changed"));
    schedule(0);
  });
  input.value = "";
}
function chooseShipped(kind) {
  const sel = $("#" + kind);
  if (sel.value === "__upload__") return;
  state[kind] = sel.value; state.uploads[kind] = null;
  if (kind === "workload") state.overrides = {}; else state.topologyOverrides = {};
  schedule(0);
}

// ---------- compare ----------
function snapshot() {
  return {workload: state.workload, topology: state.topology,
    uploads: {workload: state.uploads.workload, topology: state.uploads.topology},
    overrides: {...state.overrides}, topologyOverrides: {...state.topologyOverrides}, detail: state.last};
}
function pin() {
  if (!state.last || !$("#banner").hidden || $$(".invalid").length) return;
  if (state.pins.length >= MAX_PINS) state.pins.shift();
  state.pins.push(snapshot());
  renderCompare();
  $("#pin-count").textContent = String(state.pins.length);
}
function command(cfg) {
  const w = cfg.uploads.workload ? cfg.uploads.workload.name : cfg.workload;
  const t = cfg.uploads.topology ? cfg.uploads.topology.name : cfg.topology;
  const q = (s) => (/^[A-Za-z0-9_.,=+:\/-]+$/.test(s) ? s : `'${s.replace(/'/g, "'\\''")}'`);
  const parts = ["clustersim", "run", q(w), "-t", q(t)];
  for (const [k, v] of Object.entries(cfg.overrides)) parts.push("--set", q(`${k}=${v === null ? "" : yamlScalar(v)}`));
  for (const [k, v] of Object.entries(cfg.topologyOverrides)) parts.push("--set-topology", q(`${k}=${v === null ? "" : yamlScalar(v)}`));
  parts.push("--format", "json");
  return parts.join(" ");
}
function exportAs(i, kind) {
  const cfg = state.pins[i];
  let text = "", name = "";
  if (kind === "json") { text = JSON.stringify(cfg.detail.result, null, 2) + "\n"; name = "result.json"; }
  else if (kind === "cmd") { text = command(cfg) + "\n"; name = "run.sh"; }
  else {
    const y = cfg.detail.yaml;
    text = `# ${command(cfg)}\n` + y.workload + (y.topology ? "---\n# topology\n" + y.topology : "");
    name = "workload.yaml";
  }
  $("#export-panel").hidden = false;
  $("#export-title").textContent = `Export #${i + 1} as ${kind === "cmd" ? "command" : kind.toUpperCase()}`;
  $("#export-text").value = text;
  $("#export-text").dataset.name = name;
}
function download() {
  const ta = $("#export-text");
  const a = el("a", {download: ta.dataset.name || "export.txt"});
  a.href = URL.createObjectURL(new Blob([ta.value], {type: "text/plain"}));
  document.body.append(a); a.click(); a.remove();
}
function renderCompare() {
  const pins = state.pins;
  $("#compare-empty").hidden = pins.length > 0;
  const box = $("#compare-table"); box.replaceChildren();
  const bars = $("#compare-bars"); bars.replaceChildren();
  if (!pins.length) return;
  const rows = [
    ["workload", (c) => c.detail.result.workload], ["topology", (c) => c.detail.result.topology],
    ["GPUs", (c) => c.detail.result.num_gpus],
    ["plan", (c) => { const p = c.detail.result.plan; return `TP${p.tp} PP${p.pp} VP${p.vp} CP${p.cp} EP${p.ep} DP${p.dp}`; }],
    ["batch", (c) => { const p = c.detail.result.plan; return `MBS ${p.mbs} · GBS ${p.gbs} · ${p.precision} · ${p.recompute}`; }],
    ["step time", (c) => seconds(c.detail.result.step_time_s)],
    ["tokens / s", (c) => fmt(c.detail.result.tokens_per_s)],
    ["MFU", (c) => pct(c.detail.result.mfu)], ["HFU", (c) => pct(c.detail.result.hfu)],
    ["memory / GPU", (c) => `${c.detail.result.memory_per_gpu_GB.toFixed(1)} GB${c.detail.result.fits_in_memory ? "" : " (does not fit)"}`],
    ["changed", (c) => Object.entries({...c.overrides, ...c.topologyOverrides}).map(([k, v]) => `${k}=${yamlScalar(v)}`).join(", ") || "–"],
  ];
  const table = el("table", {class: "compare"});
  const head = el("tr", {}, el("th", {text: ""}));
  pins.forEach((c, i) => head.append(el("th", {class: "compare-col", text: `#${i + 1}`})));
  table.append(head);
  for (const [label, get] of rows) {
    const tr = el("tr", {}, el("td", {text: label}));
    pins.forEach((c) => tr.append(el("td", {class: label === "changed" ? "text" : "", text: String(get(c))})));
    table.append(tr);
  }
  const act = el("tr", {}, el("td", {text: "export"}));
  pins.forEach((c, i) => act.append(el("td", {}, el("div", {class: "exports"},
    el("button", {class: "ghost small", text: "YAML", onclick: () => exportAs(i, "yaml")}),
    el("button", {class: "ghost small", text: "JSON", onclick: () => exportAs(i, "json")}),
    el("button", {class: "ghost small", text: "command", onclick: () => exportAs(i, "cmd")}),
    el("button", {class: "ghost small", text: "load", onclick: () => loadConfig(c)}),
    el("button", {class: "ghost small", text: "×", title: "unpin", onclick: () => { state.pins.splice(i, 1); $("#pin-count").textContent = String(state.pins.length); renderCompare(); }})))));
  table.append(act);
  box.append(table);
  const max = Math.max(...pins.map((c) => c.detail.result.step_time_s));
  pins.forEach((c, i) => {
    const r = c.detail.result;
    const track = el("div", {class: "track"});
    for (const [k, v] of ordered(r.breakdown_s)) {
      if (v <= 0) continue;
      const f = el("div", {class: "fill", title: `${breakdownLabel(k)}: ${seconds(v)}`});
      f.style.width = `${(v / max) * 100}%`; f.style.background = COLORS[k] || "#888"; track.append(f);
    }
    bars.append(el("div", {class: "hbar wide"}, el("span", {text: `#${i + 1} ${r.workload}, ${r.num_gpus} GPUs`}), track,
      el("span", {class: "num", text: `${seconds(r.step_time_s)} · ${fmt(r.tokens_per_s)} tok/s`})));
  });
  const legend = el("div", {class: "legend"});
  for (const [k, c] of Object.entries(COLORS)) { const i = el("i"); i.style.background = c; legend.append(el("span", {}, i, breakdownLabel(k))); }
  bars.append(legend);
}
function loadConfig(c) {
  state.workload = c.workload; state.topology = c.topology;
  state.uploads = {workload: c.uploads.workload, topology: c.uploads.topology};
  state.overrides = {...c.overrides}; state.topologyOverrides = {...c.topologyOverrides};
  selectShipped();
  syncFromOverrides();
  showTab("editor");
  schedule(0);
}
function selectShipped() {
  for (const kind of ["workload", "topology"]) {
    const sel = $("#" + kind);
    if (!state.uploads[kind]) sel.value = state[kind];
  }
}

// ---------- search and capacity jobs ----------
const jobs = {search: null, capacity: null};
function sortableTable(box, columns, rows, onLoad, frontier) {
  let key = null, dir = 1;
  function draw() {
    box.replaceChildren();
    const sorted = key === null ? rows : [...rows].sort((a, b) => {
      const x = a[key], y = b[key];
      if (typeof x === "number" && typeof y === "number") return dir * (x - y);
      return dir * String(x).localeCompare(String(y));
    });
    const table = el("table");
    const head = el("tr");
    for (const c of columns) {
      const th = el("th", {class: "sortable" + (c === key ? (dir > 0 ? " asc" : " desc") : ""), text: c.replace(/_/g, " ")});
      th.addEventListener("click", () => { dir = key === c ? -dir : 1; key = c; draw(); });
      head.append(th);
    }
    head.append(el("th", {text: ""}));
    table.append(head);
    for (const row of sorted) {
      const tr = el("tr", {class: frontier && row.on_frontier ? "frontier" : ""});
      for (const c of columns) {
        const v = row[c];
        let text = v;
        if (typeof v === "number") {
          text = /(^|_)time_s$/.test(c) ? seconds(v) : (c === "mfu" || c === "hfu") ? pct(v) : fmt(v);
        }
        if (typeof v === "boolean") text = v ? "yes" : "";
        tr.append(el("td", {class: c === "why" ? "text" : (c === "plan" || c === "topology") ? "left" : "", text: text === null || text === undefined ? "–" : String(text)}));
      }
      tr.append(el("td", {}, el("button", {class: "ghost small", text: "load", onclick: () => onLoad(row)})));
      table.append(tr);
    }
    box.append(table);
  }
  draw();
}
function jobUi(prefix, on) {
  $(`#${prefix}-start`).disabled = on; $(`#${prefix}-cancel`).disabled = !on;
}
function num(id) { return scalar($(id).value); }
async function startJob(kind) {
  const prefix = kind === "search" ? "s" : "c";
  $$(`#tab-${kind} .err`).forEach((e) => { e.textContent = ""; });
  let body = {kind, ...request()};
  if (kind === "search") body = {...body, gpus: num("#s-gpus"), top: num("#s-top"), max_simulations: num("#s-max")};
  else {
    body = {...body, tokens: num("#c-tokens"), gpus: $("#c-gpus").value.split(/[ ,]+/).filter(Boolean).map(scalar),
      topologies: $$("#c-topologies input:checked").map((i) => i.value),
      deadline_days: num("#c-deadline"), budget_usd: num("#c-budget")};
  }
  const res = await post("/api/jobs", body);
  if (!res.ok) { $(`#${prefix}-status`).textContent = res.data.error; return; }
  jobs[kind] = res.data.id;
  jobUi(prefix, true);
  $(`#${prefix}-table`).replaceChildren();
  poll(kind, res.data.id);
}
async function poll(kind, id) {
  const prefix = kind === "search" ? "s" : "c";
  const bar = $(`#${prefix}-bar`), status = $(`#${prefix}-status`);
  while (jobs[kind] === id) {
    const r = await fetch(`/api/jobs/${id}`);
    const d = await r.json();
    if (!r.ok) { status.textContent = d.error; break; }
    const p = d.progress;
    if (d.state === "running") {
      bar.classList.toggle("indeterminate", !p.total);
      bar.style.width = p.total ? `${(100 * p.done) / p.total}%` : "";
      status.textContent = `${p.label}${p.total ? ` ${p.done} / ${p.total}` : "…"} · ${d.elapsed_s.toFixed(1)} s`;
      await new Promise((ok) => setTimeout(ok, 300));
      continue;
    }
    bar.classList.remove("indeterminate");
    bar.style.width = d.state === "done" ? "100%" : "0";
    if (d.state === "done") {
      const res = d.result;
      status.textContent = kind === "search" ?
        `${res.rows.length} plans · ${res.counts.simulated} simulated of ${res.counts.plans} · ${d.elapsed_s.toFixed(1)} s` :
        `${res.rows.length} options · ${d.elapsed_s.toFixed(1)} s`;
      sortableTable($(`#${prefix}-table`), res.columns, res.rows, (row) => loadRow(kind, row), kind === "capacity");
    } else {
      status.textContent = d.error || d.state;
      const slot = d.field && $(`#tab-${kind} [data-err="${CSS.escape(d.field)}"]`);
      if (slot) slot.textContent = d.error;
    }
    break;
  }
  if (jobs[kind] === id) { jobs[kind] = null; jobUi(prefix, false); }
}
async function cancelJob(kind) {
  const id = jobs[kind];
  if (!id) return;
  jobs[kind] = null;
  await fetch(`/api/jobs/${id}`, {method: "DELETE"});
  const prefix = kind === "search" ? "s" : "c";
  $(`#${prefix}-bar`).classList.remove("indeterminate"); $(`#${prefix}-bar`).style.width = "0";
  $(`#${prefix}-status`).textContent = "cancelled";
  jobUi(prefix, false);
}
function loadRow(kind, row) {
  const ov = row.overrides || {};
  state.overrides = {...state.overrides, ...ov};
  if (kind === "capacity" && row.topology) { state.topology = String(row.topology); state.uploads.topology = null; }
  selectShipped(); syncFromOverrides(); showTab("editor"); schedule(0);
}

// ---------- tabs and start-up ----------
function showTab(name) {
  $$("#tabs button").forEach((b) => b.classList.toggle("active", b.dataset.tab === name));
  $$(".tab").forEach((t) => t.classList.toggle("active", t.id === `tab-${name}`));
}
async function start() {
  readHash();
  const shipped = await (await fetch("/api/shipped")).json();
  state.shipped = shipped;
  for (const kind of ["workload", "topology"]) {
    const sel = $("#" + kind);
    const names = shipped[kind === "workload" ? "workloads" : "topologies"];
    for (const n of names) sel.append(el("option", {value: n, text: n}));
    if (!names.includes(state[kind]) && !state.uploads[kind]) state[kind] = names[0];
    sel.value = state[kind];
    sel.addEventListener("change", () => chooseShipped(kind));
    $(`#upload-${kind}`).addEventListener("change", (ev) => upload(kind, ev.target));
  }
  for (const s of shipped.schedules) $("#f-schedule").append(el("option", {value: s, text: s}));
  for (const s of shipped.stacks || []) $("#f-stack").append(el("option", {value: s, text: s}));
  for (const input of fieldInputs()) input.addEventListener(input.tagName === "SELECT" ? "change" : "input", onFieldEdit);
  $("#editor").addEventListener("submit", (ev) => ev.preventDefault());
  $("#reset").addEventListener("click", () => { state.overrides = {}; state.topologyOverrides = {}; fieldInputs().forEach((i) => i.classList.remove("changed")); schedule(0); });
  $("#copy-link").addEventListener("click", () => { writeHash(); navigator.clipboard && navigator.clipboard.writeText(location.href); $("#status").textContent = "link copied"; });
  $("#pin").addEventListener("click", pin);
  $("#export-copy").addEventListener("click", () => navigator.clipboard && navigator.clipboard.writeText($("#export-text").value));
  $("#export-download").addEventListener("click", download);
  $$("#tabs button").forEach((b) => b.addEventListener("click", () => showTab(b.dataset.tab)));
  $("#s-start").addEventListener("click", () => startJob("search"));
  $("#s-cancel").addEventListener("click", () => cancelJob("search"));
  $("#c-start").addEventListener("click", () => startJob("capacity"));
  $("#c-cancel").addEventListener("click", () => cancelJob("capacity"));
  if (!shipped.capacity) {
    $("#c-form").hidden = true; $("#c-missing").hidden = false;
    $("#c-missing").textContent = "Capacity planning is not in this installation: simulator.capacity is missing (it arrives with a newer clustersim).";
  }
  for (const n of shipped.topologies) {
    const cb = el("input", {type: "checkbox", value: n});
    if (n === state.topology) cb.checked = true;
    $("#c-topologies").append(el("label", {}, cb, n));
  }
  syncFromOverrides();
  window.addEventListener("hashchange", () => { readHash(); selectShipped(); syncFromOverrides(); schedule(0); });
  refresh();
}
document.addEventListener("DOMContentLoaded", start);
