import { describe, it, expect } from "vitest";
import { splitOf, seriesStyles, stepRange, yRange, logRange, logHeight, niceTicks, shade } from "../src/lib/chart.js";

const S = (run, name, steps = [1]) => ({ run, name, steps });

describe("series styles", () => {
  it("names a metric and its split", () => {
    expect(splitOf("loss")).toEqual({ metric: "loss", split: "train" });
    expect(splitOf("val_loss")).toEqual({ metric: "loss", split: "val" });
    expect(splitOf("test_accuracy")).toEqual({ metric: "accuracy", split: "test" });
    expect(splitOf("val_f1")).toEqual({ metric: "f1", split: "val" });
  });

  it("tells loss, val_loss and test_loss apart by dash, and val_accuracy from val_f1 by hue", () => {
    const st = seriesStyles([S("r", "loss"), S("r", "val_loss"), S("r", "test_loss")]);
    expect(new Set(st.map((s) => s.stroke)).size).toBe(1);           // one metric: one hue
    expect(new Set(st.map((s) => JSON.stringify(s.dash))).size).toBe(3);
    const m = seriesStyles([S("r", "val_accuracy"), S("r", "val_f1")]);
    expect(m[0].stroke).not.toBe(m[1].stroke);
    expect(m[0].dash).toEqual(m[1].dash);
  });

  it("tells two runs of one series apart by a second cue (shade and width), not only by label", () => {
    const st = seriesStyles([S("a", "loss"), S("b", "loss"), S("a", "val_loss"), S("b", "val_loss")]);
    expect(st[0].stroke).not.toBe(st[1].stroke);
    expect(st[0].width).not.toBe(st[1].width);
    expect(st[0].stroke).toBe(st[2].stroke);
    expect(st.map((s) => s.label)).toEqual(["a: loss", "b: loss", "a: val_loss", "b: val_loss"]);
    expect(shade("#000000", 0.5)).toBe("#808080");
  });
});

describe("axis ranges", () => {
  it("a single evaluation point sits inside the run's steps", () => {
    const r = stepRange([{ steps: Uint32Array.from([1, 2, 300]) }, { steps: Uint32Array.from([300]) }]);
    expect(r).toEqual([1, 300]);
    expect(stepRange([{ steps: [5] }])).toEqual([4, 6]);
    expect(stepRange([])).toBe(null);
  });

  it("one accuracy value gets a narrow band, not 0..2", () => {
    const [lo, hi] = yRange(0.9, 0.9);
    expect(lo).toBeGreaterThan(0.8);
    expect(hi).toBeLessThan(1);
    expect(yRange(0.2, 0.6)).toEqual([0.2 - 0.02, 0.6 + 0.02].map((v) => expect.closeTo(v, 12)));
  });

  it("log ranges enclose the data's decades and log panels grow with them", () => {
    expect(logRange(0.3, 2.3)).toEqual([0.1, 10]);
    expect(logRange(1e-7, 1)).toEqual([1e-7, 1]);
    expect(logRange(Math.fround(1e-8), 1)).toEqual([1e-8, 1]);   // a float32 value is not a decade lower
    expect(logRange(0.5, 0.5)).toEqual([0.1, 1]);
    expect(logHeight(0.3, 2.3)).toBe(200);
    expect(logHeight(1e-8, 1)).toBeGreaterThanOrEqual(8 * 32 + 100);
  });
});

describe("nice ticks", () => {
  it("never repeats a label over a narrow range", () => {
    expect(niceTicks(299, 301)).toEqual([299, 299.5, 300, 300.5, 301]);
    expect(niceTicks(0, 1)).toEqual([0, 0.25, 0.5, 0.75, 1]);
    const t = niceTicks(0.62, 0.91);
    expect(t.every((v) => v >= 0.62 && v <= 0.91)).toBe(true);
    expect(t.length).toBeGreaterThanOrEqual(3);
    expect(new Set(t.map(String)).size).toBe(t.length);
  });
});

describe("tick labels", () => {
  it("take as many digits as distinct ticks need", async () => {
    const { fmtTicks } = await import("../src/lib/ticks.js");
    expect(fmtTicks([299, 299.5, 300, 300.5, 301])).toEqual(["299", "299.5", "300", "300.5", "301"]);
    expect(fmtTicks([0.1, 0.2])).toEqual(["0.1", "0.2"]);
    expect(fmtTicks([1e-4, 1.5e-4])).toEqual(["1.0e-4", "1.5e-4"]);
  });
});
