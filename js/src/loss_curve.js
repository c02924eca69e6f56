import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import "./lib/common.css";
import "./loss_curve.css";
import { align, groupOf } from "./lib/pack.js";
import { attachStore } from "./lib/store.js";
import { throttle } from "./lib/throttle.js";
import { h } from "./lib/cell.js";
import { withFallback } from "./lib/fallback.js";
import { lrRange, tickValues } from "./lib/ticks.js";
import { seriesStyles, splitOf, stepRange, yRange, logRange, logHeight } from "./lib/chart.js";

const GROUPS = [["loss", "Loss"], ["metrics", "Metrics"], ["lr", "Learning rate"]];

function css(name, fallback) {
  const v = getComputedStyle(document.body).getPropertyValue(name).trim();
  return v || fallback;
}

function initialize({ model }) { attachStore(model); }

function render({ model, el }) {
  const st = attachStore(model);
  const root = h("div", "sc-w sc-curve");
  const bar = h("div", "sc-row sc-toolbar");
  const title = h("span", "sc-title", model.get("title") || "Training curves");
  const logBtn = h("button", "sc-btn", "log y");
  logBtn.type = "button";
  const info = h("span", "sc-muted sc-count");
  bar.append(title, logBtn, info);
  const panels = h("div", "sc-panels");
  root.append(bar, panels);
  el.append(root);
  let plots = [];

  // the last width measured while laid out: a rebuild while JupyterLab swaps its theme's CSS (the output
  // has no width for a moment) keeps it instead of a guess, and fit() re-measures on the next frame
  let lastWidth = 0;
  const widthNow = () => {
    const w = el.clientWidth || root.clientWidth;
    if (w) lastWidth = Math.max(240, w - 24);
    return lastWidth || 576;
  };
  function fit() {
    if (!el.clientWidth) return;
    const w = widthNow();
    for (const p of plots) if (Math.abs(p.u.width - w) > 4) p.u.setSize({ width: w, height: p.u.height });
  }
  // the y extent of a panel's finite (and, on a log axis, positive) values
  function extentOf(list, log) {
    let lo = Infinity, hi = -Infinity;
    for (const s of list) for (const v of s.values) if (Number.isFinite(v) && (!log || v > 0)) { if (v < lo) lo = v; if (v > hi) hi = v; }
    return [lo, hi];
  }

  function build() {
    const width = widthNow();
    for (const p of plots) p.u.destroy();
    plots = [];
    el.dataset.builds = String((Number(el.dataset.builds) || 0) + 1);
    panels.replaceChildren();
    const series = st.series;
    const axisStroke = css("--jp-ui-font-color2", "#666");
    const grid = css("--jp-border-color2", "#ddd");
    for (const [g, label] of GROUPS) {
      const list = series.filter((s) => groupOf(s.name) === g && s.steps.length);
      if (!list.length) continue;
      const box = h("div", "sc-panel");
      box.dataset.group = g;
      panels.append(box);
      const log = model.get("log_y") && g === "loss";     // metrics and the lr schedule stay linear (warm-up starts at 0)
      const styles = seriesStyles(list);
      box.dataset.series = JSON.stringify(styles);
      const height = log ? logHeight(...extentOf(list, true)) : g === "lr" ? 150 : 200;
      const opts = {
        width, height, title: label,
        // every panel spans the run's steps (one evaluation point does not stretch its own x axis); a
        // learning rate is often constant: from 0 up, so a flat series still gets ticks on its axis
        scales: { x: { time: false, range: () => stepRange(st.series) || [0, 1] },
          y: log ? { distr: 3, range: (u, lo, hi) => logRange(lo, hi) } : g === "lr" ? { range: lrRange }
            : { range: (u, lo, hi) => yRange(lo, hi) } },
        axes: [{ stroke: axisStroke, grid: { stroke: grid, width: 0.5 }, ticks: { stroke: grid, width: 0.5 }, label: "step" },
          { stroke: axisStroke, grid: { stroke: grid, width: 0.5 }, ticks: { stroke: grid, width: 0.5 }, size: 56,
            values: tickValues, space: g === "lr" ? 16 : 30 }],      // the short lr panel still gets 3+ ticks
        legend: { live: true, markers: { width: 2, dash: (u, i) => {
          const d = u.series[i].dash;                  // the legend's marker says the line's dash too
          return !d ? "solid" : d[0] <= 3 ? "dotted" : "dashed";
        } } },
        cursor: { drag: { x: true, y: false } },
        series: [{ label: "step" }, ...list.map((s, i) => ({
          label: styles[i].label, stroke: styles[i].stroke, dash: styles[i].dash || undefined,
          width: styles[i].width, spanGaps: true,
          // sparse series (evaluations) always show their points; dense ones only while short
          points: { show: splitOf(s.name).split !== "train" ? true : (u) => u.data[0].length < 60 },
          value: (u, v) => (v == null ? "–" : Number(v).toPrecision(5)),
        }))],
        hooks: { draw: [(u) => drawSkipped(u, list), (u) => {          // the drawn ranges (what tests read)
          box.dataset.x = `${u.scales.x.min},${u.scales.x.max}`;
          box.dataset.y = `${u.scales.y.min},${u.scales.y.max}`;
        }] },
      };
      const u = new uPlot(opts, align(list), box);
      plots.push({ u, g, log, keys: list.map((s) => `${s.run}\u0000${s.name}`) });
    }
    info.textContent = countText(series);
  }

  // skipped (non-finite) steps: red ticks along the bottom of the loss panel
  function drawSkipped(u, list) {
    const skipped = [];
    for (const s of list) for (const x of s.skipped) skipped.push(x);
    if (!skipped.length) return;
    const ctx = u.ctx;
    ctx.save();
    ctx.strokeStyle = css("--jp-error-color1", "#d32f2f");
    ctx.lineWidth = 2 * devicePixelRatio;
    const bottom = u.bbox.top + u.bbox.height;
    for (const x of skipped) {
      const px = u.valToPos(x, "x", true);
      if (px < u.bbox.left || px > u.bbox.left + u.bbox.width) continue;
      ctx.beginPath(); ctx.moveTo(px, bottom); ctx.lineTo(px, bottom - 10 * devicePixelRatio); ctx.stroke();
    }
    ctx.restore();
  }

  function countText(series) {
    const n = series.reduce((a, s) => a + (s.name === "loss" ? s.steps.length : 0), 0);
    const k = series.reduce((a, s) => a + s.skipped.length, 0);
    const last = series.filter((s) => s.name === "loss" && s.steps.length).map((s) => s.steps[s.steps.length - 1]);
    el.dataset.points = String(n);
    el.dataset.skipped = String(k);
    return `${n} points${last.length ? ` · last step ${Math.max(...last)}` : ""}${k ? ` · ${k} skipped (non-finite)` : ""}`;
  }

  // new points: set data on the existing plots when the set of series is unchanged, else rebuild
  const update = throttle(() => {
    const series = st.series;
    const want = GROUPS.map(([g]) => series.filter((s) => groupOf(s.name) === g && s.steps.length)
      .map((s) => `${s.run}\u0000${s.name}`).join("|")).filter(Boolean);
    const have = plots.map((p) => p.keys.join("|"));
    if (want.join("\n") !== have.join("\n")) { build(); return; }
    for (const p of plots) {
      const list = p.keys.map((k) => series.find((s) => `${s.run}\u0000${s.name}` === k));
      p.u.setData(align(list));
      if (p.log) {                                     // more decades: a taller panel
        const hgt = logHeight(...extentOf(list, true));
        if (hgt !== p.u.height) p.u.setSize({ width: p.u.width, height: hgt });
      }
    }
    info.textContent = countText(series);
  }, { interval: 200, immediate: 3 });

  const onSeries = () => update();
  st.listeners.add(onSeries);
  const onLog = () => { logBtn.classList.toggle("sc-primary", !!model.get("log_y")); el.dataset.logY = String(!!model.get("log_y")); build(); };
  logBtn.addEventListener("click", () => { model.set("log_y", !model.get("log_y")); model.save_changes(); });
  model.on("change:log_y", onLog);
  model.on("change:title", () => { title.textContent = model.get("title") || "Training curves"; });
  const ro = new ResizeObserver(fit);
  ro.observe(el);
  // JupyterLab's theme switch changes the CSS variables the canvas colours were read from: redraw
  const mo = new MutationObserver(() => { build(); requestAnimationFrame(fit); });
  mo.observe(document.body, { attributes: true, attributeFilter: ["data-jp-theme-light", "data-jp-theme-name"] });
  logBtn.classList.toggle("sc-primary", !!model.get("log_y"));
  // ask the kernel for a fresh snapshot (points appended before this view existed are in the model store
  // already; this covers a page reload whose model state came from an older snapshot)
  model.send({ type: "sync" });
  requestAnimationFrame(build);
  return () => { update.cancel(); st.listeners.delete(onSeries); ro.disconnect(); mo.disconnect(); model.off("change:log_y", onLog);
    for (const p of plots) p.u.destroy(); };
}

export default { initialize, render: withFallback(render) };
