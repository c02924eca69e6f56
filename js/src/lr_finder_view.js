import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import "./lib/common.css";
import { button, h, writeAndRecord, showWrite } from "./lib/cell.js";
import { withFallback } from "./lib/fallback.js";
import { tickValues } from "./lib/ticks.js";

function css(name, fallback) {
  return getComputedStyle(document.body).getPropertyValue(name).trim() || fallback;
}

function render({ model, el }) {
  const token = Math.random().toString(36).slice(2);
  const root = h("div", "sc-w sc-lrf");
  const sug = model.get("suggested");
  const head = h("div", "sc-row");
  head.append(h("span", "sc-title", "LR range test"),
    h("span", "sc-suggest", sug != null ? `suggested lr ${Number(sug).toPrecision(3)}` : "no suggestion (too few points)"));
  const apply = button(sug != null ? `Use lr = ${Number(sug).toPrecision(3)} in the spec` : "Use suggestion", () => {
    apply.disabled = true;
    model.send({ type: "apply", token });
  });
  apply.dataset.action = "apply";
  apply.disabled = sug == null || !model.get("can_apply");
  if (!model.get("can_apply")) apply.title = "shown without on_apply: nothing to write into";
  head.append(apply);
  const plotBox = h("div");
  const cellBox = h("div");
  root.append(head, plotBox, cellBox);
  el.append(root);
  const lrs = model.get("lrs") || [];
  const losses = (model.get("losses") || []).map((v) => (v == null || !Number.isFinite(v) ? null : v));
  let u = null;
  const build = () => {
    if (u) u.destroy();
    const stroke = css("--jp-ui-font-color2", "#666");
    const grid = css("--jp-border-color2", "#ddd");
    u = new uPlot({
      width: Math.max(240, (root.clientWidth || el.clientWidth || 600) - 24), height: 220,
      scales: { x: { time: false, distr: 3 }, y: losses.every((v) => v == null || v > 0) ? { distr: 3 } : {} },
      axes: [{ stroke, grid: { stroke: grid, width: 0.5 }, ticks: { stroke: grid, width: 0.5 }, label: "learning rate (log)",
        values: tickValues, space: 60 },
      { stroke, grid: { stroke: grid, width: 0.5 }, ticks: { stroke: grid, width: 0.5 }, size: 56, values: tickValues, space: 30 }],
      series: [{ label: "lr", value: (u, v) => (v == null ? "–" : Number(v).toExponential(2)) },
        { label: "loss", stroke: "#1f77b4", width: 1.5, spanGaps: true }],
      hooks: { draw: [(u) => {
        if (sug == null) return;
        const x = u.valToPos(sug, "x", true);
        const ctx = u.ctx; ctx.save();
        ctx.strokeStyle = css("--jp-error-color1", "#d32f2f"); ctx.setLineDash([5, 4]); ctx.lineWidth = 1.5 * devicePixelRatio;
        ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke(); ctx.restore();
      }] },
    }, [lrs, losses], plotBox);
  };
  requestAnimationFrame(build);
  const ro = new ResizeObserver(() => {
    const w = Math.max(240, (root.clientWidth || 600) - 24);
    if (u && Math.abs(u.width - w) > 4) u.setSize({ width: w, height: u.height });
  });
  ro.observe(root);
  const mo = new MutationObserver(build);
  mo.observe(document.body, { attributes: true, attributeFilter: ["data-jp-theme-light", "data-jp-theme-name"] });
  const onMsg = (msg) => {
    if (msg && msg.type === "applied" && msg.token === token) {
      writeAndRecord(model, el, msg.text);
      apply.disabled = false;
    }
  };
  const onWrite = () => showWrite(el, cellBox, model.get("_last_write"));
  model.on("msg:custom", onMsg);
  model.on("change:_last_write", onWrite);
  onWrite();
  return () => { model.off("msg:custom", onMsg); model.off("change:_last_write", onWrite); mo.disconnect(); ro.disconnect(); if (u) u.destroy(); };
}

export default { render: withFallback(render) };
