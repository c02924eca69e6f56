// The stage explorer's data helpers (plan.explain.explain's dict), kept apart from the DOM so vitest checks them.
export const PHASES = ["forward", "backward", "update"];

export function fmtB(n) {
  n = Number(n || 0);
  for (const [u, k] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]]) if (n >= k) return `${(n / k).toFixed(1)} ${u}`;
  return `${n} B`;
}

/** {node id (or "loss", "optimizer"): [launch indices]} in schedule order. */
export function nodeLaunches(d) {
  const out = {};
  for (const r of d.program.steps) {
    if (!r.node) continue;
    (out[r.node] = out[r.node] || []).push(...r.launches);
  }
  return out;
}

/** The arena values a launch binds (what its bindings hold). */
export function valuesOfLaunch(l) {
  return l.bindings.filter((b) => b.value != null && b.buffer.startsWith("arena")).map((b) => b.value);
}

/** What a binding holds, in words: a leaf (parameter, data, state) or a value with the step that makes it. */
export function bindingText(d, b) {
  if (b.leaf) return `${b.leaf} (${b.role})`;
  if (b.value != null) {
    const r = d.program.steps.find((s) => s.value === b.value);
    return r ? `value ${b.value}: ${r.op} of ${r.scope} (step ${r.pos})` : `value ${b.value}`;
  }
  return b.buffer.startsWith("scratch") ? "the launcher's scratch" : "";
}
