import ELK from "elkjs/lib/elk-api.js";
import "./lib/common.css";
import "./graph_view.css";
import { button, h, writeAndRecord, showWrite } from "./lib/cell.js";
import { withFallback } from "./lib/fallback.js";
import { elkGraph, layered, fmtCount, parseValue, NODE_W, NODE_H } from "./lib/layout.js";

// The ELK engine (1.6 MB) is not part of this module, so saved widget state stays small: the kernel sends
// it once per page on request and it runs in a Web Worker made from a Blob.
let elkPromise = null;
function elkFrom(model) {
  if (elkPromise) return elkPromise;
  elkPromise = new Promise((resolve, reject) => {
    const timer = setTimeout(() => { elkPromise = null; reject(new Error("no layout engine from the kernel")); }, 8000);
    const on = (msg, buffers) => {
      if (!msg || msg.type !== "elk" || !buffers || !buffers.length) return;
      clearTimeout(timer);
      model.off("msg:custom", on);
      const url = URL.createObjectURL(new Blob([buffers[0]], { type: "text/javascript" }));
      resolve(new ELK({ workerFactory: () => new Worker(url) }));
    };
    model.on("msg:custom", on);
    model.send({ type: "elk" });
  });
  return elkPromise;
}

function render({ model, el }) {
  const token = Math.random().toString(36).slice(2);
  const root = h("div", "sc-w sc-graph");
  const head = h("div", "sc-row");
  const canvas = h("div", "sc-canvas");
  const editor = h("div", "sc-editor");
  const cellBox = h("div");
  root.append(head, canvas, editor, cellBox);
  el.append(root);
  let selected = null;

  function positions(info) {
    const saved = model.get("_layout") || {};
    const ids = (info.nodes || []).map((n) => n.id);
    if (saved.key === key(info) && ids.every((id) => saved.pos && saved.pos[id])) return { pos: saved.pos, by: "elk" };
    return { pos: layered(info), by: "fallback" };
  }
  const key = (info) => JSON.stringify([(info.nodes || []).map((n) => n.id), info.edges || []]);

  function draw() {
    const info = model.get("info") || {};
    const { pos, by } = positions(info);
    el.dataset.layout = by;
    el.dataset.nodes = String((info.nodes || []).length);
    const total = (info.nodes || []).reduce((a, n) => a + (n.params || 0), 0);
    head.replaceChildren(h("span", "sc-title", "Model graph"),
      h("span", "sc-muted", `${(info.nodes || []).length} nodes · ${fmtCount(total)} parameters · input ${JSON.stringify((info.input || {}).shape || [])}`));
    let w = 0, hgt = 0;
    for (const id in pos) { w = Math.max(w, pos[id].x + NODE_W + 12); hgt = Math.max(hgt, pos[id].y + NODE_H + 12); }
    canvas.replaceChildren();
    canvas.style.height = `${hgt}px`;
    const inner = h("div", "sc-inner");
    inner.style.width = `${w}px`; inner.style.height = `${hgt}px`;
    const svgNS = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(svgNS, "svg");
    svg.setAttribute("width", w); svg.setAttribute("height", hgt); svg.classList.add("sc-edges");
    for (const [s, t] of info.edges || []) {
      if (!pos[s] || !pos[t]) continue;
      const p = document.createElementNS(svgNS, "path");
      const x1 = pos[s].x + NODE_W / 2, y1 = pos[s].y + NODE_H, x2 = pos[t].x + NODE_W / 2, y2 = pos[t].y;
      p.setAttribute("d", `M${x1},${y1} C${x1},${(y1 + y2) / 2} ${x2},${(y1 + y2) / 2} ${x2},${y2}`);
      svg.append(p);
    }
    inner.append(svg);
    for (const n of info.nodes || []) {
      const d = h("div", "sc-node" + (n.id === selected ? " sc-sel" : ""));
      d.style.left = `${pos[n.id].x}px`; d.style.top = `${pos[n.id].y}px`;
      d.style.width = `${NODE_W}px`; d.style.height = `${NODE_H}px`;
      d.dataset.node = n.id;
      d.append(h("div", "sc-op", n.id === n.op ? n.op : `${n.id}: ${n.op}`),
        h("div", "sc-muted", `[${(n.shape || []).join(", ")}]`),
        h("div", "sc-muted", n.params ? `${fmtCount(n.params)} params` : "no params"));
      d.addEventListener("click", () => { selected = n.id; draw(); });
      inner.append(d);
    }
    canvas.append(inner);
    drawEditor(info);
    showWrite(el, cellBox, model.get("_last_write"));
    if (model.get("_edit_error")) cellBox.append(h("div", "sc-error", model.get("_edit_error")));
  }

  function send(edit) {
    model.send({ type: "edit", edit, token });
    for (const b of editor.querySelectorAll("button")) b.disabled = true;
  }

  function drawEditor(info) {
    editor.replaceChildren();
    const n = (info.nodes || []).find((x) => x.id === selected);
    if (!n) { editor.append(h("div", "sc-note", "click a node to edit it")); return; }
    const can = model.get("can_edit");
    editor.append(h("div", "sc-title", `${n.id} (${n.op})`));
    const t = h("table", "sc-table");
    for (const [k, v] of Object.entries(n.attrs || {})) {
      const tr = h("tr");
      const inp = h("input", "sc-input");
      inp.value = typeof v === "string" ? v : JSON.stringify(v);
      inp.dataset.attr = k;
      const set = button("set", () => send({ action: "set", node: n.id, key: k, value: parseValue(inp.value) }));
      set.disabled = !can;
      const td1 = h("td"); td1.append(inp);
      const td2 = h("td"); td2.append(set);
      tr.append(h("td", null, k), td1, td2);
      t.append(tr);
    }
    editor.append(t);
    const row = h("div", "sc-row");
    const op = h("input", "sc-input"); op.placeholder = "op, e.g. relu"; op.dataset.role = "add-op";
    const add = button("add after", () => op.value.trim() && send({ action: "add", after: n.id, op: op.value.trim(), attrs: {} }));
    const rm = button("remove node", () => send({ action: "remove", node: n.id }));
    add.disabled = rm.disabled = !can;
    row.append(op, add, rm);
    editor.append(row);
    if (!can) editor.append(h("div", "sc-note", "shown without on_edit: edits are not possible here"));
  }

  async function layout() {
    const info = model.get("info") || {};
    const saved = model.get("_layout") || {};
    if (saved.key === key(info)) return;
    try {
      const elk = await elkFrom(model);
      const res = await elk.layout(elkGraph(info));
      const pos = {};
      for (const c of res.children || []) pos[c.id] = { x: c.x + 12, y: c.y + 12 };
      model.set("_layout", { key: key(info), pos });
      model.save_changes();
    } catch (e) {
      el.dataset.layoutError = String(e);
    }
  }

  const onMsg = (msg) => {
    if (msg && msg.type === "edited" && msg.token === token) {
      writeAndRecord(model, el, msg.text);
      draw();
    }
  };
  const onInfo = () => { draw(); layout(); };
  model.on("change:info", onInfo);
  model.on("change:_layout", draw);
  model.on("change:_last_write", draw);
  model.on("change:_edit_error", draw);
  model.on("msg:custom", onMsg);
  draw();
  layout();
  return () => { model.off("change:info", onInfo); model.off("change:_layout", draw); model.off("change:_last_write", draw); model.off("change:_edit_error", draw); model.off("msg:custom", onMsg); };
}

export default { render: withFallback(render) };
