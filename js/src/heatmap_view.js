import "./lib/common.css";
import "./heatmap_view.css";
import { h } from "./lib/cell.js";
import { withFallback } from "./lib/fallback.js";
import { ramp, extent } from "./lib/colors.js";

function render({ model, el }) {
  const root = h("div", "sc-w sc-heat");
  el.append(root);
  function draw() {
    const xs = model.get("x_values") || [], ys = model.get("y_values") || [];
    const vals = model.get("values") || [];
    const ext = extent(vals);
    root.replaceChildren(h("div", "sc-title", `${model.get("metric")} by ${model.get("y_name")} × ${model.get("x_name")}`));
    const t = h("table", "sc-table sc-grid");
    const hr = h("tr");
    hr.append(h("th", "sc-muted", `${model.get("y_name")} \\ ${model.get("x_name")}`));
    for (const x of xs) hr.append(h("th", null, String(x)));
    t.append(hr);
    let filled = 0;
    ys.forEach((y, i) => {
      const tr = h("tr");
      tr.append(h("th", null, String(y)));
      xs.forEach((x, j) => {
        const v = vals[i] ? vals[i][j] : null;
        const td = h("td", "sc-cell", v == null ? "…" : Number(v).toPrecision(4));
        if (v != null) {
          filled++;
          const f = ext && ext[1] > ext[0] ? (v - ext[0]) / (ext[1] - ext[0]) : 0.5;
          td.style.background = ramp(f);
          td.style.color = f > 0.6 ? "#000" : "#fff";
        }
        td.title = `${model.get("y_name")}=${y}, ${model.get("x_name")}=${x}: ${v == null ? "not yet run" : v}`;
        tr.append(td);
      });
      t.append(tr);
    });
    el.dataset.filled = String(filled);
    root.append(t);
    if (ext) root.append(h("div", "sc-note", `range ${ext[0].toPrecision(4)} … ${ext[1].toPrecision(4)}`));
  }
  const keys = ["values", "x_values", "y_values", "metric"];
  for (const k of keys) model.on(`change:${k}`, draw);
  draw();
  return () => { for (const k of keys) model.off(`change:${k}`, draw); };
}

export default { render: withFallback(render) };
