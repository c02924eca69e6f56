import "./lib/common.css";
import "./stage_explorer.css";
import { h } from "./lib/cell.js";
import { withFallback } from "./lib/fallback.js";
import { layered, fmtCount } from "./lib/layout.js";
import { PHASES, fmtB, nodeLaunches, valuesOfLaunch, bindingText } from "./lib/stages.js";

const SVG = "http://www.w3.org/2000/svg";
const ROLE = { activations: "#76b7b2", gradients: "#f28e2b", workspace: "#bab0ac" };

function svg(tag, attrs = {}) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

function render({ model, el }) {
  const root = h("div", "sc-w sc-x");
  el.append(root);
  let sel = { node: null, launch: null };

  function draw() {
    const d = model.get("data") || {};
    if (!d.program) { root.replaceChildren(h("div", "sc-note", "no stages")); return; }
    const { program: pr, plan: pl, launches, kernels, graph } = d;
    const byNode = nodeLaunches(d);
    el.dataset.steps = String(pr.steps.length);
    el.dataset.launches = String(launches.length);
    el.dataset.node = sel.node || "";
    el.dataset.launch = sel.launch == null ? "" : String(sel.launch);
    el.dataset.kernel = sel.launch == null ? "" : kernels[launches[sel.launch].k].name;
    const launch = sel.launch == null ? null : launches[sel.launch];
    const lit = new Set(launch ? valuesOfLaunch(launch) : []);
    const nodeSteps = new Set(sel.node ? pr.steps.filter((r) => r.node === sel.node).map((r) => r.pos) : []);

    const dev = d.device || {};
    const head = h("div", "sc-title",
      `Stages of ${d.spec.name}'s training step on ${dev.backend}:${dev.name} · batch ${pr.batch_size} · ` +
      `tier ${pr.tier} · program ${String(pr.hash).slice(0, 12)}`);
    const parts = [head];
    if (dev.note) parts.push(h("div", "sc-note", `note: ${dev.note}`));
    parts.push(h("div", "sc-note", "click a node for its kernels, a kernel for its buffers and WGSL"));

    // ---- spec -------------------------------------------------------------------------------------------
    const spec = h("details", "sc-x-spec");
    spec.append(h("summary", "sc-x-h", "Spec"), h("pre", "sc-x-pre", d.spec.text || ""));
    parts.push(spec);

    // ---- graph: the spec's nodes by depth, then the loss and the optimizer --------------------------------
    const gsec = h("div", "sc-x-sec");
    gsec.append(h("div", "sc-x-h", `Graph · ${(graph.nodes || []).length} nodes · ` +
      `${fmtCount((graph.nodes || []).reduce((a, n) => a + (n.params || 0), 0))} parameters · input ` +
      `${JSON.stringify((graph.input || {}).shape)}`));
    const pos = layered(graph);
    const order = [...(graph.nodes || [])].sort((a, b) => (pos[a.id].y - pos[b.id].y) || (pos[a.id].x - pos[b.id].x));
    const extra = ["loss", "optimizer"].filter((k) => byNode[k])
      .map((k) => ({ id: k, op: k === "loss" ? "loss" : "update", shape: null, params: null, pseudo: true }));
    const flow = h("div", "sc-x-graph");
    [...order, ...extra].forEach((n, i) => {
      if (i) flow.append(h("span", "sc-x-arrow", "→"));
      const b = h("button", "sc-x-node" + (n.pseudo ? " sc-x-pseudo" : "") + (sel.node === n.id ? " sc-x-on" : ""));
      b.dataset.node = n.id;
      const nl = (byNode[n.id] || []).length;
      b.append(h("div", "sc-x-nid", n.id === n.op ? n.id : `${n.id}: ${n.op}`),
        h("div", "sc-x-nsub", n.pseudo ? `${nl} dispatches` : `${JSON.stringify(n.shape)} · ${fmtCount(n.params) || 0} params`),
        h("div", "sc-x-nsub", n.pseudo ? "" : `${nl} dispatches`));
      b.onclick = () => { sel = { node: sel.node === n.id ? null : n.id, launch: null }; draw(); };
      flow.append(b);
    });
    gsec.append(flow);
    parts.push(gsec);

    // ---- program (left) and the selection's details (right) --------------------------------------------------
    const row = h("div", "sc-x-row");
    const psec = h("div", "sc-x-sec sc-x-prog");
    psec.append(h("div", "sc-x-h", `Program · ${pr.steps.length} steps · ${launches.length} dispatches of ` +
      `${kernels.length} kernels`));
    const list = h("div", "sc-x-list");
    let first = null;
    for (const ph of PHASES) {
      const rs = pr.steps.filter((r) => r.phase === ph);
      list.append(h("div", "sc-x-phase", `${ph} · ${rs.length} steps`));
      for (const r of rs) {
        const cur = launch && launch.first <= r.pos && r.pos <= launch.step;
        const line = h("div", "sc-x-step" + (nodeSteps.has(r.pos) ? " sc-x-on" : "") + (cur ? " sc-x-cur" : ""));
        line.dataset.pos = String(r.pos);
        line.dataset.phase = ph;
        line.append(h("span", "sc-x-pos", String(r.pos)), h("span", "sc-x-op", r.op),
          h("span", "sc-x-scope", r.scope), h("span", "sc-x-shape", JSON.stringify(r.shape)));
        const ks = h("span", "sc-x-ks");
        if (!r.launches.length) {
          ks.append(h("span", "sc-muted", r.batched_into != null ? `in step ${r.batched_into}'s batch` : "no dispatch (a view)"));
        }
        for (const i of r.launches) ks.append(chip(i));
        line.append(ks);
        line.onclick = (e) => {
          if (e.target.closest(".sc-x-kern")) return;
          const ls = r.launches.length ? r.launches : r.batched_into != null ? pr.steps[r.batched_into].launches : [];
          if (ls.length) { sel = { node: sel.node, launch: ls[0] }; draw(); }
        };
        if (!first && (nodeSteps.has(r.pos) || cur)) first = line;
        list.append(line);
      }
    }
    psec.append(list);
    row.append(psec, details(d, byNode, launch));
    parts.push(row);

    // ---- plan: the arena over the schedule ------------------------------------------------------------------
    parts.push(arena(d, lit, nodeSteps, launch));
    root.replaceChildren(...parts);
    // the selection's first step in view, scrolling the list only (never the notebook around the widget)
    if (first) list.scrollTop = Math.max(0, first.offsetTop - 24);
  }

  function chip(i, withStep = false) {
    const d = model.get("data");
    const k = d.kernels[d.launches[i].k];
    const r = d.program.steps[d.launches[i].step];
    const c = h("button", "sc-x-kern" + (sel.launch === i ? " sc-x-on" : ""),
      withStep ? `${k.name} · step ${r.pos} ${r.op}` : k.name);
    c.dataset.launch = String(i);
    c.dataset.kernel = k.name;
    c.title = k.key;
    c.onclick = () => { sel = { node: sel.node, launch: i }; draw(); };
    return c;
  }

  function details(d, byNode, launch) {
    const box = h("div", "sc-x-sec sc-x-detail");
    if (launch) {
      const k = d.kernels[launch.k];
      const r = d.program.steps[launch.step];
      box.append(h("div", "sc-x-h", `Kernel ${k.name}`),
        h("div", "sc-note", (launch.first < launch.step ? `steps ${launch.first}–${launch.step} (one multi-tensor batch` +
          `, ${r.phase}, ${r.scope})` : `step ${r.pos} (${r.phase}, ${r.scope})`) +
          `: ${r.op} → ${JSON.stringify(r.shape)} ${r.dtype} · workgroups ${launch.groups.join("×")}`),
        keyLine(k.key));
      const t = h("table", "sc-table sc-x-binds");
      const hr = h("tr");
      for (const c of ["@binding", "buffer", "bytes", "holds"]) hr.append(h("th", null, c));
      t.append(hr);
      launch.bindings.forEach((b, j) => {
        const tr = h("tr");
        tr.dataset.value = b.value == null ? "" : String(b.value);
        tr.append(h("td", null, String(j + 1)), h("td", null, b.buffer),
          h("td", null, `${fmtB(b.nbytes)} at ${b.offset}`), h("td", null, bindingText(d, b)));
        t.append(tr);
      });
      box.append(t, h("div", "sc-x-h", `WGSL · ${k.wgsl.split("\n").length} lines`));
      const pre = h("pre", "sc-x-pre sc-x-wgsl");
      pre.textContent = k.wgsl;
      box.append(pre);
    } else if (sel.node) {
      const ls = byNode[sel.node] || [];
      box.append(h("div", "sc-x-h", `Node ${sel.node} · ${ls.length} dispatches`));
      for (const ph of PHASES) {
        const mine = ls.filter((i) => d.program.steps[d.launches[i].step].phase === ph);
        if (!mine.length) continue;
        const line = h("div", "sc-x-kline");
        line.append(h("span", "sc-x-ph", ph));
        for (const i of mine) line.append(chip(i, true));
        box.append(line);
      }
    } else {
      box.append(h("div", "sc-x-h", "Selection"),
        h("div", "sc-note", "a node: its kernels; a kernel: its bindings and WGSL source"));
    }
    return box;
  }

  function keyLine(key) {
    // a fused kernel's key holds its whole instruction list: the start of it, the rest on hover
    const e = h("div", "sc-note sc-x-key", `pipeline ${key.length > 120 ? key.slice(0, 120) + "…" : key}`);
    e.title = key;
    return e;
  }

  function arena(d, lit, nodeSteps, launch) {
    const { plan: pl, program: pr } = d;
    const sec = h("div", "sc-x-sec");
    sec.append(h("div", "sc-x-h", `Plan · arena ${fmtB(pl.arena_bytes)} · live peak ${fmtB(pl.live_peak_bytes)} ` +
      `at step ${pl.live_peak_step} · whole-run peak ${fmtB(pl.peak_bytes)} (${pl.verdict})`));
    const W = 800, H = 180, n = Math.max(pr.steps.length, 1), total = Math.max(pl.arena_bytes, 1);
    const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", height: H, preserveAspectRatio: "none",
      class: "sc-x-arena" });
    s.append(svg("rect", { width: W, height: H, class: "sc-x-bg" }));
    const any = lit.size || nodeSteps.size;
    for (const v of pl.values) {
      if (v.start == null) continue;
      const on = lit.has(v.value) || nodeSteps.has(v.made_at);
      const r = svg("rect", { x: (W * v.start) / n, y: (H * v.offset) / total,
        width: Math.max((W * (v.end + 1 - v.start)) / n, 1), height: Math.max((H * v.size) / total, 1),
        fill: ROLE[v.role] || "#999", class: "sc-x-val" + (on ? " sc-x-lit" : any ? " sc-x-dim" : "") });
      r.dataset.value = String(v.value);
      const t = svg("title");
      t.textContent = `value ${v.value} (${v.op}, ${v.scope}, ${v.role}): ${fmtB(v.size)} at offset ${v.offset}, ` +
        `live steps ${v.start}–${v.end}`;
      r.append(t);
      r.onclick = () => {
        const ls = pr.steps[v.made_at] ? pr.steps[v.made_at].launches : [];
        if (ls.length) { sel = { node: sel.node, launch: ls[0] }; draw(); }
      };
      s.append(r);
    }
    if (pl.live_peak_step != null) {
      const x = (W * (pl.live_peak_step + 0.5)) / n;
      s.append(svg("line", { x1: x, x2: x, y1: 0, y2: H, class: "sc-x-peak" }));
    }
    if (launch) {
      const x = (W * (launch.step + 0.5)) / n;
      s.append(svg("line", { x1: x, x2: x, y1: 0, y2: H, class: "sc-x-now" }));
    }
    sec.append(s, h("div", "sc-note", `x: the schedule, step 0 to ${pr.steps.length - 1} (red dashes: the live peak)` +
      ` · y: arena offset, 0 at the top · colour: activations, gradients, workspace · click a value for the ` +
      `kernel that writes it`));
    return sec;
  }

  model.on("change:data", draw);
  draw();
  return () => model.off("change:data", draw);
}

export default { render: withFallback(render) };
