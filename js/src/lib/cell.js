// Writing a widget's new cell text into its own notebook cell (JupyterLab 4, CodeMirror 6).
// The output area lives inside the cell (`.jp-Cell`); its editor's `.cm-content` element carries CodeMirror's
// view reference. A whole-document change keeps undo working (Ctrl-Z brings the old text back).

function editorViewOf(content) {
  const v = content && (content.cmView || content.cmTile);
  if (!v) return null;
  for (const cand of [v.rootView && v.rootView.view, v.view, v.root && v.root.view, v.editorView]) {
    if (cand && cand.state && typeof cand.dispatch === "function") return cand;
  }
  return null;
}

/** Replace the text of the cell holding `el`; true when done, false when no editable cell was found. */
export function writeCell(el, text) {
  const cell = el.closest && el.closest(".jp-Cell");
  if (!cell) return false;
  const content = cell.querySelector(".jp-InputArea .cm-content") || cell.querySelector(".cm-content");
  const view = editorViewOf(content);
  if (!view) return false;
  view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text } });
  return true;
}

/** Write `text` into the cell holding `el` and remember the outcome on the model (`_last_write`), so a
 * view re-created by a refreshed output (the kernel re-publishes the static form) shows it too. */
export function writeAndRecord(model, el, text) {
  if (text == null) return;
  const status = writeCell(el, text) ? "cell" : "shown";
  const prev = model.get("_last_write") || {};
  model.set("_last_write", { status, text, n: (prev.n || 0) + 1 });
  model.save_changes();
}

/** The outcome of the last write, in `box`: a note, or the text with a copy button (no editable cell). */
export function showWrite(el, box, w) {
  box.replaceChildren();
  if (!w || !w.status) return;
  el.dataset.cellWrite = w.status;
  el.dataset.writes = String(w.n || 0);
  if (w.status === "cell") {
    box.append(h("div", "sc-note", "The cell's text was updated to match."));
    return;
  }
  const pre = h("pre", "sc-celltext", w.text);
  const copy = button("Copy", () => navigator.clipboard && navigator.clipboard.writeText(w.text));
  box.append(h("div", "sc-note", "Could not edit the cell from here; the new cell text:"), pre, copy);
}

export function button(label, onClick, title = "") {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "sc-btn";
  b.textContent = label;
  if (title) b.title = title;
  b.addEventListener("click", onClick);
  return b;
}

export function h(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = text;
  return e;
}

export function fmtBytes(n) {
  if (n == null) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (Math.abs(v) >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return `${i ? v.toFixed(v < 10 ? 2 : 1) : v} ${u[i]}`;
}
