import { describe as group, it, expect } from "vitest";
import { colorOf, describe, icicle, inWindow, PALETTE, starts, topRows } from "../src/lib/flame.js";

const d = (scope, op, kernel, us, shape = "f32[2] -> f32[2]") => ({ scope, op, kernel, us, shape });
// fc1 forward (matmul, then a fused add), loss, fc1 backward (two matmuls of different shapes), optimizer
const TL = [d("fc1", "matmul", "matmul", 10, "f32[8,4] f32[4,6] -> f32[8,6]"), d("fc1", "fused", "elementwise", 2),
  d("loss", "fused", "elementwise", 1), d("", "reduce_sum", "reduce", 0.5),
  d("fc1/bwd", "matmul", "matmul", 7, "f32[4,8] f32[8,6] -> f32[4,6]"),
  d("fc1/bwd", "matmul", "matmul", 5, "f32[8,6] f32[6,4] -> f32[8,4]"), d("optimizer", "fused", "fused_multi", 4)];

group("icicle layout", () => {
  const blocks = icicle(TL);
  const row = (l) => blocks.filter((b) => b.level === l);
  it("tiles every row end to end: blocks abut, and each row spans the whole step", () => {
    const total = starts(TL)[TL.length];
    expect(total).toBeCloseTo(29.5, 12);
    for (let l = 0; l < 4; l++) {
      const r = row(l);
      expect(r[0].x0).toBe(0);
      expect(r[r.length - 1].x1).toBeCloseTo(total, 12);
      for (let k = 1; k < r.length; k++) expect(r[k].x0).toBe(r[k - 1].x1);
      expect(r.reduce((s, b) => s + b.us, 0)).toBeCloseTo(total, 12);
    }
  });
  it("groups consecutive dispatches by layer, then op, then kernel; one block per dispatch at the bottom", () => {
    expect(row(0).map((b) => b.label)).toEqual(["fc1", "loss", "(other)", "fc1/bwd", "optimizer"]);
    expect(row(1).map((b) => [b.label, b.i1 - b.i0])).toEqual([["matmul", 1], ["fused", 1], ["fused", 1],
      ["reduce_sum", 1], ["matmul", 2], ["fused", 1]]);
    expect(row(2).length).toBe(6);                 // the two backward matmuls share layer, op and kernel
    expect(row(3).length).toBe(TL.length);
    expect(row(3)[4].label).toBe("f32[4,6]");          // a dispatch: its result's shape
  });
  it("a child never crosses its parent's edges", () => {
    for (let l = 1; l < 4; l++) {
      for (const c of row(l)) {
        const p = row(l - 1).find((q) => q.i0 <= c.i0 && c.i1 <= q.i1);
        expect(p).toBeTruthy();
      }
    }
  });
});

group("zoom window", () => {
  const blocks = icicle(TL);
  it("clips blocks to the zoomed block and rescales them to its width", () => {
    const bwd = blocks.find((b) => b.level === 0 && b.label === "fc1/bwd");
    const shown = inWindow(blocks, bwd.x0, bwd.x1, 0);
    expect(shown.every((b) => b.i0 >= 4 && b.i1 <= 6)).toBe(true);
    const leaves = shown.filter((b) => b.level === 3);
    expect(leaves.map((b) => b.width)).toEqual([7 / 12, 5 / 12].map((v) => expect.closeTo(v, 12)));
    expect(leaves[0].left).toBe(0);
  });
  it("drops blocks thinner than minFrac and an empty window", () => {
    const shown = inWindow(blocks, 0, 29.5, 0.02);
    expect(shown.some((b) => b.label === "reduce_sum")).toBe(false);  // 0.5 / 29.5 < 2%
    expect(inWindow(blocks, 3, 3)).toEqual([]);
  });
});

group("top kernels table", () => {
  it("sums time per (kernel, shape) in a range, largest first, with shares of that range", () => {
    const rows = topRows(TL, 10);
    expect(rows[0]).toMatchObject({ kernel: "matmul", calls: 1, us: 10 });
    expect(rows.reduce((s, r) => s + r.share, 0)).toBeCloseTo(1, 12);
    const three = topRows(TL.concat([d("fc1", "fused", "elementwise", 2)]), 3);
    expect(three.length).toBe(3);
    expect(three.find((r) => r.kernel === "elementwise" && r.shape === "f32[2] -> f32[2]").calls).toBe(3);
    const bwd = topRows(TL, 10, 4, 6);
    expect(bwd.map((r) => r.us)).toEqual([7, 5]);
    expect(bwd[0].share).toBeCloseTo(7 / 12, 12);
  });
});

group("hover text and colours", () => {
  it("says the block's time and share; a dispatch names its kernel and shape", () => {
    const blocks = icicle(TL);
    const mm = blocks.find((b) => b.level === 3 && b.i0 === 0);
    const t = describe(mm, TL, 29.5, 29.5);
    expect(t.title).toBe("matmul");
    expect(t.lines.join(" ")).toContain("f32[8,4] f32[4,6] -> f32[8,6]");
    expect(t.lines.join(" ")).toContain(`${(1000 / 29.5).toFixed(1)}%`);
    const layer = describe(blocks.find((b) => b.level === 0 && b.label === "fc1/bwd"), TL, 29.5, 12);
    expect(layer.lines.join(" ")).toContain("2 dispatches");
    expect(layer.lines.join(" ")).toContain("100.0% of this view");
  });
  it("colours are stable per label and from the palette", () => {
    expect(colorOf("matmul")).toBe(colorOf("matmul"));
    expect(PALETTE).toContain(colorOf("fc1/bwd"));
  });
});
