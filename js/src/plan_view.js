import "./lib/common.css";
import "./plan_view.css";
import { button, h, fmtBytes, writeAndRecord, showWrite } from "./lib/cell.js";
import { withFallback } from "./lib/fallback.js";
import { verdictWords, barSegments } from "./lib/plan_words.js";

const COLORS = { parameters: "#4e79a7", gradients: "#f28e2b", optimizer_state: "#e15759", activations: "#76b7b2",
  workspace: "#59a14f", master_weights: "#edc948", data: "#b07aa1", buffers: "#9c755f", evaluation: "#ff9da7",
  readback: "#bab0ac" };

function render({ model, el }) {
  const token = Math.random().toString(36).slice(2);
  const root = h("div", "sc-w sc-plan");
  el.append(root);
  const cellBox = h("div", "sc-cellbox");
  let busy = false;

  function draw() {
    const p = model.get("plan") || {};
    const err = model.get("error");
    root.className = `sc-w sc-plan sc-${p.verdict || "none"}`;
    el.dataset.verdict = p.verdict || "";
    root.replaceChildren();
    const head = h("div", "sc-row");
    head.append(h("span", "sc-badge", (p.verdict || "?").toUpperCase()),
      h("span", "sc-title", `Plan for ${p.spec || "?"}`),
      h("span", "sc-muted", `${p.backend || ""}:${p.device || ""} · batch ${p.batch_size} · tier ${p.tier}`));
    const words = h("div", "sc-words", verdictWords(p));
    root.append(head, words);
    // what the device is, said plainly (the CPU path is slow, which is not the verdict's question)
    if (p.device_note) root.append(h("div", "sc-muted sc-device", `device: ${p.device_note}`));

    // the stacked bar: each category's bytes against capacity (the marker)
    const { segs, capacity } = barSegments(p);
    const bar = h("div", "sc-bar");
    for (const s of segs) {
      const seg = h("div", "sc-seg");
      seg.style.left = `${100 * s.x}%`;
      seg.style.width = `${100 * s.w}%`;
      seg.style.background = COLORS[s.key] || "#888";
      seg.title = `${s.key}: ${fmtBytes(s.bytes)}`;
      bar.append(seg);
    }
    const cap = h("div", "sc-cap");
    cap.style.left = `calc(${100 * capacity}% - 1px)`;
    cap.title = `capacity ${fmtBytes(p.capacity_bytes)}`;
    bar.append(cap);
    const legend = h("div", "sc-row sc-legend");
    for (const s of segs) {
      const it = h("span", "sc-leg");
      const sw = h("i", "sc-sw"); sw.style.background = COLORS[s.key] || "#888";
      it.append(sw, `${s.key.replace("_", " ")} ${fmtBytes(s.bytes)}`);
      legend.append(it);
    }
    const capLeg = h("span", "sc-leg"); capLeg.append(h("i", "sc-sw sc-capsw"), `capacity ${fmtBytes(p.capacity_bytes)}`);
    legend.append(capLeg);
    root.append(bar, legend);

    for (const n of p.notes || []) root.append(h("div", "sc-note", `note: ${n}`));
    if (p.verdict !== "yellow") for (const w of p.warnings || []) root.append(h("div", "sc-note", `warning: ${w}`));

    const fixes = p.fixes || [];
    if (fixes.length) {
      const box = h("div", "sc-fixes");
      box.append(h("div", "sc-muted", "Fixes (each is a re-plan):"));
      fixes.forEach((f, i) => {
        const after = f.peak_bytes != null ? ` → ${fmtBytes(f.peak_bytes)} (${f.verdict})` : "";
        const b = button(`${f.description}${after}`, () => {
          if (busy) return;
          busy = true; el.dataset.busy = "1";
          for (const x of box.querySelectorAll("button")) x.disabled = true;
          model.send({ type: "fix", index: i, token });
        }, `apply fix ${f.kind}`);
        b.dataset.fix = String(i);
        b.classList.add("sc-fix", `sc-${f.verdict || "none"}`);
        b.disabled = !model.get("can_fix");
        if (!model.get("can_fix")) b.title = "no kernel-side handler: this plan was shown without on_fix";
        box.append(b);
      });
      root.append(box);
    }
    if (err) root.append(h("div", "sc-error", err));
    root.append(cellBox);
    showWrite(el, cellBox, model.get("_last_write"));
  }

  const onMsg = (msg) => {
    if (!msg || msg.token !== token) return;
    if (msg.type === "fixed") {
      busy = false; delete el.dataset.busy;
      writeAndRecord(model, el, msg.text);
      draw();
    }
  };
  model.on("change:plan", draw);
  model.on("change:error", draw);
  model.on("change:_last_write", draw);
  model.on("msg:custom", onMsg);
  draw();
  return () => { model.off("change:plan", draw); model.off("change:error", draw); model.off("change:_last_write", draw); model.off("msg:custom", onMsg); };
}

export default { render: withFallback(render) };
