import "./lib/common.css";
import "./catalog_browser.css";
import { h } from "./lib/cell.js";
import { withFallback } from "./lib/fallback.js";

function render({ model, el }) {
  const root = h("div", "sc-w sc-catalog");
  el.append(root);
  let kind = null;
  let selected = null;
  let query = "";

  function draw() {
    const entries = model.get("entries") || [];
    const kinds = [...new Set(entries.map((e) => e.kind))].sort();
    if (!kinds.includes(kind)) kind = kinds[0] || null;
    root.replaceChildren();
    const bar = h("div", "sc-row");
    bar.append(h("span", "sc-title", "Catalog"));
    const sel = h("select", "sc-input sc-kind");
    for (const k of kinds) {
      const o = h("option", null, `${k} (${entries.filter((e) => e.kind === k).length})`);
      o.value = k; o.selected = k === kind; sel.append(o);
    }
    sel.addEventListener("change", () => { kind = sel.value; selected = null; draw(); });
    const q = h("input", "sc-input sc-search");
    q.placeholder = "filter"; q.value = query;
    q.addEventListener("input", () => { query = q.value; drawList(); });
    bar.append(sel, q);
    const body = h("div", "sc-cat-body");
    const list = h("div", "sc-cat-list");
    const detail = h("div", "sc-cat-detail");
    body.append(list, detail);
    root.append(bar, body);

    function drawList() {
      list.replaceChildren();
      const shown = entries.filter((e) => e.kind === kind && (!query || e.name.includes(query)
        || (e.summary || "").toLowerCase().includes(query.toLowerCase())));
      for (const e of shown) {
        const it = h("div", "sc-cat-item" + (selected === e.name ? " sc-sel" : ""));
        it.append(h("b", null, e.name), h("span", "sc-muted", ` ${e.summary || ""}`));
        it.dataset.entry = e.name;
        it.addEventListener("click", () => { selected = e.name; drawList(); drawDetail(e); });
        list.append(it);
      }
      el.dataset.shown = String(shown.length);
    }
    function drawDetail(e) {
      detail.replaceChildren();
      detail.append(h("div", "sc-title", `${e.kind} ${e.name}`), h("div", null, e.summary || ""),
        h("div", "sc-note", `origin: ${e.origin || "?"}`));
      const names = Object.keys(e.params || {});
      if (!names.length) { detail.append(h("div", "sc-muted", "no parameters")); return; }
      const t = h("table", "sc-table");
      const hr = h("tr");
      for (const c of ["param", "type", "default", "range", ""]) hr.append(h("th", null, c));
      t.append(hr);
      for (const n of names) {
        const p = e.params[n];
        const tr = h("tr");
        tr.append(h("td", null, n), h("td", null, p.type), h("td", null, JSON.stringify(p.default)),
          h("td", null, p.range || "any"), h("td", "sc-muted", p.doc || ""));
        t.append(tr);
      }
      detail.append(t);
    }
    drawList();
    const cur = entries.find((e) => e.kind === kind && e.name === selected);
    if (cur) drawDetail(cur); else detail.append(h("div", "sc-muted", "pick an entry"));
  }
  model.on("change:entries", draw);
  draw();
  return () => model.off("change:entries", draw);
}

export default { render: withFallback(render) };
