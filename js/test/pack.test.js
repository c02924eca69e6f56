import { describe, it, expect } from "vitest";
import { decode, encode, merge, align, groupOf } from "../src/lib/pack.js";

const s = (run, name, steps, values, skipped = []) => ({ run, name, steps: Uint32Array.from(steps),
  values: Float32Array.from(values), skipped: Uint32Array.from(skipped) });

describe("series packing", () => {
  it("round-trips through encode/decode, including an odd-length header (padding)", () => {
    for (const run of ["a", "ab", "abc", "abcd"]) {
      const src = [s(run, "loss", [1, 2, 3], [0.5, 0.25, NaN], [3]), s(run, "lr", [1, 2, 3], [1e-3, 2e-3, 3e-3])];
      const back = decode(encode(src));
      expect(back.map((x) => [x.run, x.name])).toEqual([[run, "loss"], [run, "lr"]]);
      expect(Array.from(back[0].steps)).toEqual([1, 2, 3]);
      expect(back[0].values[1]).toBe(0.25);
      expect(Number.isNaN(back[0].values[2])).toBe(true);
      expect(Array.from(back[0].skipped)).toEqual([3]);
      expect(back[1].values[2]).toBeCloseTo(3e-3, 9);
    }
  });
  it("decodes a DataView at an offset (how a widget buffer arrives)", () => {
    const raw = new Uint8Array(encode([s("r", "loss", [7], [1.5])]));
    const big = new Uint8Array(raw.length + 3);
    big.set(raw, 3);
    const back = decode(new DataView(big.buffer, 3, raw.length));
    expect(Array.from(back[0].steps)).toEqual([7]);
    expect(back[0].values[0]).toBe(1.5);
  });
  it("merges chunks in order, adding new series", () => {
    let st = [s("r", "loss", [1, 2], [3, 2])];
    st = merge(st, [s("r", "loss", [3], [1], [3]), s("r", "val_loss", [3], [2.5])]);
    expect(Array.from(st[0].steps)).toEqual([1, 2, 3]);
    expect(Array.from(st[0].values)).toEqual([3, 2, 1]);
    expect(Array.from(st[0].skipped)).toEqual([3]);
    expect(st[1].name).toBe("val_loss");
  });
  it("empty input decodes to no series", () => {
    expect(decode(new ArrayBuffer(0))).toEqual([]);
    expect(decode(null)).toEqual([]);
  });
});

describe("align", () => {
  it("unions steps, null where a series has no point or a non-finite value", () => {
    const [xs, a, b] = align([s("r", "loss", [1, 2, 3, 4], [4, NaN, 2, 1]), s("r", "val_loss", [2, 4], [3, 1.5])]);
    expect(xs).toEqual([1, 2, 3, 4]);
    expect(a).toEqual([4, null, 2, 1]);
    expect(b).toEqual([null, 3, null, 1.5]);
  });
  it("takes the shared-steps fast path for 100k points quickly", () => {
    const n = 100000;
    const steps = Array.from({ length: n }, (_, i) => i + 1);
    const t0 = performance.now();
    const [xs, y1, y2] = align([s("r", "loss", steps, steps.map((i) => 1 / i)), s("r", "lr", steps, steps.map(() => 0.1))]);
    const dt = performance.now() - t0;
    expect(xs.length).toBe(n);
    expect(y1[n - 1]).toBeCloseTo(1 / n, 9);
    expect(y2[0]).toBeCloseTo(0.1, 6);
    expect(dt).toBeLessThan(2000);
  });
  it("groups series into panels", () => {
    expect(["loss", "val_loss", "lr", "val_accuracy"].map(groupOf)).toEqual(["loss", "loss", "lr", "metrics"]);
  });
});

import { decimate, decimateIndices } from "../src/lib/pack.js";
describe("decimate (what a saved notebook keeps)", () => {
  it("keeps each bucket's min and max, spikes included, and leaves short series alone", () => {
    const n = 100000;
    const steps = Array.from({ length: n }, (_, i) => i + 1);
    const values = steps.map((i) => 1 / Math.sqrt(i));
    values[54321] = 50;
    const [d] = decimate([s("r", "loss", steps, values, [77777])], 5000);
    expect(d.steps.length).toBeLessThanOrEqual(5000);
    expect(Math.max(...d.values)).toBe(50);
    expect(d.steps[0]).toBe(1);
    expect(Array.from(d.skipped)).toEqual([77777]);
    for (let i = 1; i < d.steps.length; i++) expect(d.steps[i]).toBeGreaterThan(d.steps[i - 1]);
    expect(decimateIndices(Float32Array.from([1, 2, 3]), 10)).toBe(null);
  });
  it("keeps a bucket with no finite value as its first point", () => {
    const v = Float32Array.from([NaN, NaN, NaN, NaN, 1, 2, 3, 4]);
    expect(decimateIndices(v, 4)).toEqual([0, 4, 7]);
  });
});
