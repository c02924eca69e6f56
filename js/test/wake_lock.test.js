import { describe, it, expect } from "vitest";
import { createWakeLock, KEY } from "../src/lib/wake_lock.js";

function fakes({ refuse = null, stored = null, noApi = false } = {}) {
  const store = new Map(stored === null ? [] : [[KEY, stored]]);
  const storage = { getItem: (k) => (store.has(k) ? store.get(k) : null), setItem: (k, v) => store.set(k, v) };
  const doc = { visibilityState: "visible" };
  const locks = [];
  const nav = noApi ? {} : {
    wakeLock: {
      request: async (type) => {
        if (refuse) throw Object.assign(new Error(refuse), { name: "NotAllowedError" });
        const ls = [];
        const l = { type, released: false, addEventListener: (ev, f) => ev === "release" && ls.push(f),
                    release: async () => { l.released = true; ls.forEach((f) => f()); } };
        locks.push(l);
        return l;
      },
    },
  };
  const changes = [];
  const wake = createWakeLock({ nav, doc, storage, onChange: (s) => changes.push(s) });
  return { wake, doc, locks, store, changes };
}

describe("wake lock", () => {
  it("asks for nothing until the user chooses it", async () => {
    const { wake, locks } = fakes();
    await wake.serve();
    expect(locks).toHaveLength(0);
    expect(wake.state).toBe("off");
  });

  it("holds a screen lock once chosen while the page serves, and keeps the choice", async () => {
    const { wake, locks, store, changes } = fakes();
    await wake.serve();
    await wake.choose(true);
    expect(locks.map((l) => l.type)).toEqual(["screen"]);
    expect(wake.state).toBe("held");
    expect(store.get(KEY)).toBe("1");
    expect(changes).toEqual(["held"]);
  });

  it("a choice made on an earlier visit is used at once, but only when serving", async () => {
    const { wake, locks } = fakes({ stored: "1" });
    expect(wake.wanted()).toBe(true);
    await wake.visibility();
    expect(locks).toHaveLength(0);          // not serving the kernel yet
    await wake.serve();
    expect(locks).toHaveLength(1);
    expect(wake.state).toBe("held");
  });

  it("is dropped when the tab hides and asked for again when it shows", async () => {
    const { wake, locks, doc } = fakes({ stored: "1" });
    await wake.serve();
    doc.visibilityState = "hidden";
    await locks[0].release();                // the browser releases it
    expect(wake.state).toBe("released while the tab was hidden");
    await wake.visibility();
    expect(locks).toHaveLength(1);           // still hidden: not asked
    doc.visibilityState = "visible";
    await wake.visibility();
    expect(locks).toHaveLength(2);
    expect(wake.state).toBe("held");
  });

  it("unticked: released and off, and remembered", async () => {
    const { wake, locks, store } = fakes({ stored: "1" });
    await wake.serve();
    await wake.choose(false);
    expect(locks[0].released).toBe(true);
    expect(wake.state).toBe("off");
    expect(store.get(KEY)).toBe("0");
  });

  it("a refusal and a browser without the API are said, not thrown", async () => {
    const a = fakes({ refuse: "not allowed in this context" });
    await a.wake.serve();
    await a.wake.choose(true);
    expect(a.wake.state).toBe("refused: not allowed in this context");
    const b = fakes({ noApi: true });
    await b.wake.choose(true);
    expect(b.wake.state).toMatch(/^unsupported: /);
  });
});
