// One series store per widget model (not per view): the snapshot trait `_packed` replaces it, appended
// chunks (custom messages with one binary buffer) merge into it, and the merged store is written back into
// the model's own `_packed` (without a round trip to the kernel) so JupyterLab's saved widget state holds
// every point, not only the last snapshot the kernel sent.
import { decode, encode, merge } from "./pack.js";

// Keyed by the widget's `_uid` trait, not the model object: anywidget hands initialize() and each render()
// a different proxy of one model, and two stores would each merge every chunk.
const stores = new Map();

export function attachStore(model) {
  const uid = model.get("_uid");
  if (uid && stores.has(uid)) return stores.get(uid);
  const st = { series: decode(model.get("_packed")), listeners: new Set(), local: false };
  const notify = () => { for (const f of st.listeners) f(st.series); };
  model.on("change:_packed", () => {
    if (st.local) return;
    st.series = decode(model.get("_packed"));
    notify();
  });
  model.on("msg:custom", (msg, buffers) => {
    if (!msg || msg.type !== "append" || !buffers || !buffers.length) return;
    st.series = merge(st.series, decode(buffers[0]));
    st.local = true;
    try { model.set("_packed", new DataView(encode(st.series))); } finally { st.local = false; }
    notify();
  });
  if (uid) stores.set(uid, st);
  return st;
}
