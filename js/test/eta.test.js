import { describe, it, expect } from "vitest";
import { rate, eta, formatDuration, pushSample, fmtValue } from "../src/lib/eta.js";
import { allowed } from "../src/lib/run_actions.js";
import { verdictWords, barSegments } from "../src/lib/plan_words.js";
import { layered, parseValue } from "../src/lib/layout.js";
import { ramp, extent } from "../src/lib/colors.js";

describe("rate and ETA", () => {
  it("uses the recent window, not the slow start", () => {
    let s = [];
    s = pushSample(s, 0, 0);
    s = pushSample(s, 30, 10);          // 30 s for the first 10 steps (kernel compilation)
    for (let t = 31; t <= 40; t++) s = pushSample(s, t, 10 + 5 * (t - 30));   // then 5 steps/s
    const r = rate(s, 10);
    expect(r).toBeCloseTo(5, 6);
    expect(eta(60, 160, r)).toBeCloseTo(20, 6);
  });
  it("has no rate with fewer than two samples, no ETA without a total", () => {
    expect(rate([{ t: 0, step: 0 }])).toBe(null);
    expect(eta(5, null, 3)).toBe(null);
    expect(eta(5, 10, 0)).toBe(null);
  });
  it("formats durations", () => {
    expect(formatDuration(5)).toBe("5s");
    expect(formatDuration(125)).toBe("2m 05s");
    expect(formatDuration(3 * 3600 + 60)).toBe("3h 01m");
    expect(formatDuration(null)).toBe("–");
  });
  it("keeps the sample list bounded", () => {
    let s = [];
    for (let i = 0; i < 1000; i++) s = pushSample(s, i * 0.01, i, 10, 64);
    expect(s.length).toBeLessThanOrEqual(64);
    expect(s[s.length - 1].step).toBe(999);
  });
});

describe("run actions", () => {
  it("says why an action is not possible", () => {
    expect(allowed("running", "stop")).toBe(null);
    expect(allowed("running", "resume")).toBe("the run is not paused");
    expect(allowed("paused", "resume")).toBe(null);
    expect(allowed("finished", "stop")).toBe("the run is finished: nothing to stop");
    expect(allowed("interrupted", "resume_run", true)).toBe(null);
    expect(allowed("interrupted", "resume_run", false)).toMatch(/no resume handler/);
    expect(allowed("finished", "resume_run", true)).toMatch(/only an interrupted run/);
  });
});

describe("plan words and bar", () => {
  const base = { peak_bytes: 600, capacity_bytes: 1000, capacity_source: "limit", breakdown: { parameters: 200, activations: 400 } };
  it("green, yellow with its reason, red", () => {
    expect(verdictWords({ ...base, verdict: "green" })).toMatch(/^Fits: peak 600 B of 1000 B \(60%\)/);
    expect(verdictWords({ ...base, verdict: "yellow", warnings: ["little headroom: 85%"] })).toMatch(/warning: little headroom: 85%/);
    expect(verdictWords({ ...base, verdict: "red", peak_bytes: 2000 })).toMatch(/Does not fit: needs 1.95 KiB/);
  });
  it("stacks the breakdown against the larger of peak and capacity", () => {
    const { segs, capacity } = barSegments({ ...base, peak_bytes: 2000, breakdown: { parameters: 500, activations: 1500 } });
    expect(segs.map((x) => [x.key, x.x, x.w])).toEqual([["parameters", 0, 0.25], ["activations", 0.25, 0.75]]);
    expect(capacity).toBe(0.5);
  });
});

describe("graph layout fallback and values", () => {
  it("layers by longest path", () => {
    const pos = layered({ nodes: [{ id: "a" }, { id: "b" }, { id: "c" }, { id: "d" }], edges: [["a", "b"], ["a", "c"], ["b", "d"], ["c", "d"]] });
    expect(pos.a.y).toBeLessThan(pos.b.y);
    expect(pos.b.y).toBe(pos.c.y);
    expect(pos.b.x).not.toBe(pos.c.x);
    expect(pos.d.y).toBeGreaterThan(pos.b.y);
  });
  it("parses typed attr values", () => {
    expect(parseValue("64")).toBe(64);
    expect(parseValue("[3, 3]")).toEqual([3, 3]);
    expect(parseValue("relu")).toBe("relu");
  });
  it("ramps colours and finds extents", () => {
    expect(ramp(0)).toBe("rgb(68,1,84)");
    expect(ramp(1)).toBe("rgb(253,231,37)");
    expect(ramp(null)).toBe(null);
    expect(extent([[null, 2], [5, NaN]])).toEqual([2, 5]);
    expect(extent([[null]])).toBe(null);
  });
});

import { fmtTick, lrRange } from "../src/lib/ticks.js";
describe("tick labels", () => {
  it("stay short on linear and log axes", () => {
    expect([0, 0.003, 1.5, 2.3456, 250, 200000, 1e-4].map(fmtTick)).toEqual(["0", "3e-3", "1.5", "2.35", "250", "2e5", "1e-4"]);
    expect(fmtTick(null)).toBe("");
  });
});

it("a constant learning rate gets a range from 0 to above it", () => {
  expect(lrRange(null, 0.005, 0.005)).toEqual([0, 0.005 * 1.15]);
  expect(lrRange(null, 0, 0)).toEqual([0, 1]);
  expect(lrRange(null, -1, 2)[0]).toBeLessThan(-1);
});

describe("a loss or metric as the run panel says it", () => {
  it("keeps a tiny loss's digits (4.7e-7 is not 0.000) and reads usual values as before", () => {
    expect(fmtValue(4.7e-7)).toBe("4.700e-7");
    expect(fmtValue(0.0673)).toBe("0.0673");
    expect(fmtValue(1.4469)).toBe("1.4469");
    expect(fmtValue(0)).toBe("0");
    expect(fmtValue(null)).toBe("");
  });
});
