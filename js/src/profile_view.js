import "./lib/common.css";
import "./profile_view.css";
import { h } from "./lib/cell.js";
import { withFallback } from "./lib/fallback.js";
import { LEVELS, colorOf, describe, fmtUs, icicle, inWindow, scopeLabel, starts, topRows } from "./lib/flame.js";

const ROW = 22;

function render({ model, el }) {
  const root = h("div", "sc-w sc-prof");
  el.append(root);
  let blocks = [], timeline = [], total = 0, zoom = [];      // zoom: the blocks clicked, outermost first

  function head() {
    const i = model.get("info") || {};
    const run = i.run ? ` (run ${i.run})` : "";
    return `profile of ${i.spec}${run} on ${i.device}: one step, ${timeline.length} dispatches, ` +
      `${fmtUs(1e3 * (i.timeline_ms || 0))} of kernels in a ${Number(i.last_step_ms || 0).toFixed(3)} ms timed step` +
      (i.loop_step_ms ? ` (${Number(i.loop_step_ms).toFixed(3)} ms untimed, as the loop runs it)` : "");
  }

  function draw() {
    timeline = model.get("timeline") || [];
    blocks = icicle(timeline);
    total = starts(timeline)[timeline.length];
    zoom = zoom.filter((z) => z.i1 <= timeline.length);
    paint();
  }

  function paint() {
    const info = model.get("info") || {};
    root.replaceChildren(h("div", "sc-title", head()), h("div", "sc-note", `timing: ${info.method || ""}`));
    el.dataset.dispatches = String(timeline.length);
    if (!timeline.length || !(total > 0)) {
      root.append(h("div", "sc-prof-empty", "no kernel was timed"));
      el.dataset.blocks = "0";
      return;
    }
    const z = zoom[zoom.length - 1];
    const x0 = z ? z.x0 : 0, x1 = z ? z.x1 : total;
    el.dataset.zoom = z ? `${LEVELS[z.level]}:${z.label}` : "";
    const body = h("div", "sc-prof-body");
    const left = h("div", "sc-flame-wrap");
    const crumbs = h("div", "sc-row sc-crumbs");
    const whole = h("button", "sc-btn sc-crumb", "whole step");
    whole.disabled = !z;
    whole.onclick = () => { zoom = []; paint(); };
    crumbs.append(whole);
    zoom.forEach((b, k) => {
      const c = h("button", "sc-btn sc-crumb", `${b.label}`);
      c.title = `${LEVELS[b.level]} ${b.label}`;
      c.disabled = k === zoom.length - 1;
      c.onclick = () => { zoom = zoom.slice(0, k + 1); paint(); };
      crumbs.append(h("span", "sc-muted", "›"), c);
    });
    const flame = h("div", "sc-flame");
    flame.style.height = `${LEVELS.length * ROW}px`;
    const shown = inWindow(blocks, x0, x1, 0.0015);
    for (const b of shown) {
      const d = timeline[b.i0];
      const div = h("div", "sc-blk", b.width > 0.04 ? b.label : "");
      div.style.left = `${100 * b.left}%`;
      div.style.width = `${100 * b.width}%`;
      div.style.top = `${b.level * ROW}px`;
      div.style.height = `${ROW - 1}px`;
      div.style.background = colorOf(b.level < 3 ? b.label : d.kernel);
      div.dataset.level = String(b.level);
      div.dataset.label = b.label;
      div.dataset.i0 = String(b.i0);
      div.onmousemove = (e) => hover(b, e);
      div.onmouseleave = unhover;
      div.onclick = () => {
        if (b.level === 3) return;
        const full = blocks.find((q) => q.level === b.level && q.i0 === b.i0) || b;
        // the zoom path stays nested: what lies inside the clicked block goes (a click on an outer row zooms out)
        zoom = [...zoom.filter((q) => !(q.x0 >= full.x0 && q.x1 <= full.x1)), full];
        unhover();
        paint();
      };
      flame.append(div);
    }
    el.dataset.blocks = String(shown.length);
    const axis = h("div", "sc-note", `rows: ${LEVELS.join(", ")} · x: kernel time ${fmtUs(x0)} – ${fmtUs(x1)}` +
      ` of ${fmtUs(total)} · click a block to zoom`);
    left.append(crumbs, flame, axis);
    body.append(left, table(z ? z.i0 : 0, z ? z.i1 : timeline.length, z));
    root.append(body, tip);
  }

  function table(i0, i1, z) {
    const wrap = h("div", "sc-prof-table");
    wrap.append(h("div", "sc-title", z ? `top kernels in ${z.label}` : "top kernels of the step"));
    const t = h("table", "sc-table");
    const hr = h("tr");
    for (const c of ["kernel (shape)", "calls", "time", "share"]) hr.append(h("th", null, c));
    t.append(hr);
    for (const r of topRows(timeline, model.get("top") || 12, i0, i1)) {
      const tr = h("tr");
      const k = h("td", "sc-kern");
      k.append(h("div", "sc-mono", r.kernel), h("div", "sc-shape", r.shape));
      tr.append(k, h("td", "sc-num", String(r.calls)), h("td", "sc-num", fmtUs(r.us)),
        h("td", "sc-num", `${(100 * r.share).toFixed(1)}%`));
      t.append(tr);
    }
    wrap.append(t);
    return wrap;
  }

  const tip = h("div", "sc-tip");
  function hover(b, e) {
    const z = zoom[zoom.length - 1];
    const d = describe(b, timeline, total, z ? z.x1 - z.x0 : total);
    tip.replaceChildren(h("div", "sc-tip-title", d.title), ...d.lines.map((l) => h("div", null, l)));
    tip.dataset.hover = b.label;
    tip.style.display = "block";
    // beside the pointer, kept inside the widget's box (it clips what overflows): above when below would not fit
    const r = root.getBoundingClientRect();
    const x = e.clientX - r.left + 12;
    let y = e.clientY - r.top + 14;
    if (y + tip.offsetHeight > r.height - 2) y = Math.max(0, e.clientY - r.top - tip.offsetHeight - 10);
    tip.style.left = `${Math.max(0, Math.min(x, r.width - tip.offsetWidth - 4))}px`;
    tip.style.top = `${y}px`;
  }
  function unhover() { tip.style.display = "none"; delete tip.dataset.hover; }

  const keys = ["timeline", "info", "top"];
  for (const k of keys) model.on(`change:${k}`, draw);
  draw();
  return () => { for (const k of keys) model.off(`change:${k}`, draw); };
}

export default { render: withFallback(render) };
