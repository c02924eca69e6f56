// One series store per widget model (not per view). Where points come from:
// - the `_packed` trait: the curve as a saved notebook keeps it (each series decimated to SAVE_POINTS); used
//   only until live data arrives (a page opened without a kernel, or before the first message);
// - custom messages from the kernel: "snapshot" (every point, the reply to a view's "sync") replaces the
//   store, "append" (the points since the last chunk) merges into it.
// The merged store is written back into the model's own `_packed`, decimated, without a round trip to the
// kernel, so JupyterLab's saved widget state holds the whole curve in bounded size.
import { decode, encode, merge, decimate } from "./pack.js";

export const SAVE_POINTS = 5000;
// Keyed by the widget's `_uid` trait, not the model object: anywidget hands initialize() and each render()
// a different proxy of one model, and two stores would each merge every chunk.
const stores = new Map();

export function attachStore(model) {
  const uid = model.get("_uid");
  if (uid && stores.has(uid)) return stores.get(uid);
  const st = { series: decode(model.get("_packed")), listeners: new Set(), local: false, live: false };
  const notify = () => { for (const f of st.listeners) f(st.series); };
  model.on("change:_packed", () => {
    if (st.local || st.live) return;
    st.series = decode(model.get("_packed"));
    notify();
  });
  model.on("msg:custom", (msg, buffers) => {
    if (!msg || (msg.type !== "append" && msg.type !== "snapshot") || !buffers || !buffers.length) return;
    const chunk = decode(buffers[0]);
    st.series = msg.type === "snapshot" ? chunk : merge(st.series, chunk);
    st.live = true;
    st.local = true;
    try { model.set("_packed", new DataView(encode(decimate(st.series, SAVE_POINTS)))); } finally { st.local = false; }
    notify();
  });
  if (uid) stores.set(uid, st);
  return st;
}
