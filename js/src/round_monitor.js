import "./lib/common.css";
import "./round_monitor.css";
import { h } from "./lib/cell.js";
import { withFallback } from "./lib/fallback.js";
import { siteProgress, curve, budget } from "./lib/rounds.js";
import { fmtTicks } from "./lib/ticks.js";

const NS = "http://www.w3.org/2000/svg";
const W = 360, H = 120, PAD = 24, LEFT = 44;       // LEFT: room for the y tick labels

function svg(tag, attrs) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

function bar(frac, cls) {
  const b = h("div", `sc-bar${cls ? ` ${cls}` : ""}`);
  const f = h("div");
  f.style.width = `${(100 * frac).toFixed(1)}%`;
  b.append(f);
  return b;
}

function render({ model, el }) {
  const root = h("div", "sc-w sc-rounds");
  el.append(root);
  function draw() {
    const s = model.get("state") || {};
    const metric = model.get("metric");
    const rounds = s.rounds || [];
    root.replaceChildren(h("div", "sc-title", `${s.strategy || "federation"} on ${(s.sites || []).length} sites`));
    root.append(h("div", "sc-note", `trust ${s.trust}, secure aggregation ${s.secure ? "on" : "off"}, model version ${s.version}, ` +
      `${rounds.length} round${rounds.length === 1 ? "" : "s"}${model.get("planned") ? ` of ${model.get("planned")}` : ""}`));
    // per-site progress
    const grid = h("div", "sc-sites");
    const live = model.get("live") || {};
    const NOW = { training: `training round ${live.round}…`, sent: `sent round ${live.round}`, out: `sits round ${live.round} out` };
    for (const p of siteProgress(s, model.get("planned"), live)) {
      const row = h("span", "sc-num", p.site);
      row.dataset.site = p.site;
      if (p.now) row.dataset.now = p.now; else delete row.dataset.now;
      const words = `${p.answered} answered${p.silent ? `, ${p.silent} silent` : ""}${p.loss != null ? `, loss ${p.loss.toFixed(4)}` : ""}` +
        (p.now ? `; ${NOW[p.now]}` : "");
      grid.append(row, bar(p.frac), h("span", "sc-num sc-muted", words));
    }
    root.append(grid);
    // the metric per round
    const c = curve(rounds, W, H, PAD, LEFT);
    const g = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `${metric} per round` });
    g.append(svg("line", { class: "sc-axis", x1: LEFT, y1: H - PAD, x2: W - PAD, y2: H - PAD }),
      svg("line", { class: "sc-axis", x1: LEFT, y1: PAD, x2: LEFT, y2: H - PAD }));
    if (c) {
      const labels = fmtTicks(c.yticks.map((t) => t.v));
      for (const [i, { y }] of c.yticks.entries()) {            // the y axis's ticks: a mark, a label, a faint grid line
        g.append(svg("line", { class: "sc-grid", x1: LEFT, y1: y.toFixed(1), x2: W - PAD, y2: y.toFixed(1) }),
          svg("line", { class: "sc-axis", x1: LEFT - 4, y1: y.toFixed(1), x2: LEFT, y2: y.toFixed(1) }));
        const lab = svg("text", { class: "sc-ytick", x: LEFT - 6, y: (y + 3).toFixed(1), "text-anchor": "end" });
        lab.textContent = labels[i];
        g.append(lab);
      }
      g.append(svg("polyline", { class: "sc-line", points: c.points }));
      const t = svg("text", { x: LEFT, y: 12 });
      t.textContent = `${metric} ${c.lo.toFixed(3)}..${c.hi.toFixed(3)}, last ${c.last.toFixed(4)}`;
      g.append(t);
    } else {
      const t = svg("text", { x: LEFT + 6, y: H / 2 });
      t.textContent = `no ${metric} yet`;
      g.append(t);
    }
    root.append(g);
    // the privacy budget
    const b = budget(s.privacy);
    if (b) {
      const row = h("div", "sc-row");
      row.append(h("span", "sc-num", `ε ${b.spent.toFixed(3)} of ${b.epsilon} spent (δ ${b.delta})`));
      const m = bar(b.frac, "sc-eps");
      m.style.flex = "1 1 6em";
      row.append(m);
      root.append(row);
      el.dataset.eps = b.spent.toFixed(4);
    } else {
      root.append(h("div", "sc-note", "differential privacy off"));
      delete el.dataset.eps;
    }
    el.dataset.rounds = String(rounds.length);
    el.dataset.points = String(c ? c.n : 0);
  }
  const keys = ["state", "metric", "planned", "live"];
  for (const k of keys) model.on(`change:${k}`, draw);
  draw();
  return () => { for (const k of keys) model.off(`change:${k}`, draw); };
}

export default { render: withFallback(render) };
