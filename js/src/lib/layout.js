// Graph layout helpers: the ELK input for a graph_info dict, and a layered fallback (no ELK available:
// a saved notebook opened without a kernel, or before the layout engine arrived).
export const NODE_W = 170, NODE_H = 58;

export function elkGraph(info) {
  return {
    id: "root",
    layoutOptions: { "elk.algorithm": "layered", "elk.direction": "DOWN", "elk.spacing.nodeNode": "24",
      "elk.layered.spacing.nodeNodeBetweenLayers": "28" },
    children: (info.nodes || []).map((n) => ({ id: n.id, width: NODE_W, height: NODE_H })),
    edges: (info.edges || []).map(([s, t], i) => ({ id: `e${i}`, sources: [s], targets: [t] })),
  };
}

/** Positions {id: {x, y}} by longest-path depth from the sources; nodes of one depth side by side. */
export function layered(info) {
  const nodes = (info.nodes || []).map((n) => n.id);
  const preds = new Map(nodes.map((id) => [id, []]));
  for (const [s, t] of info.edges || []) if (preds.has(t)) preds.get(t).push(s);
  const depth = new Map();
  const visit = (id, seen = new Set()) => {
    if (depth.has(id)) return depth.get(id);
    if (seen.has(id)) return 0;
    seen.add(id);
    const d = Math.max(-1, ...preds.get(id).filter((p) => preds.has(p)).map((p) => visit(p, seen))) + 1;
    depth.set(id, d);
    return d;
  };
  for (const id of nodes) visit(id);
  const rows = new Map();
  const pos = {};
  for (const id of nodes) {
    const d = depth.get(id);
    const k = rows.get(d) || 0;
    rows.set(d, k + 1);
    pos[id] = { x: 12 + k * (NODE_W + 24), y: 12 + d * (NODE_H + 28) };
  }
  return pos;
}

export function fmtCount(n) {
  if (n == null) return "";
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)}M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)}k`;
  return String(n);
}

/** A typed attr value from what was typed: JSON when it parses (numbers, lists, true), else the string. */
export function parseValue(text) {
  const t = text.trim();
  try { return JSON.parse(t); } catch { return t; }
}
