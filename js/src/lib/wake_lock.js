// The Screen Wake Lock of a page whose GPU trains for the kernel, held only with the user's consent: a sleeping
// screen stops the page, and so the run, but keeping a screen on is the user's call, not the notebook's. The choice
// (a checkbox on the browser GPU widget, a user gesture) is kept per origin in localStorage, so it is asked once.
// The browser drops the lock whenever the tab is hidden; it is asked for again when the tab is shown.
// state: "off" (not chosen), "held", "released while the tab was hidden", "refused: why", "unsupported: why".

export const KEY = "scellis:keep-awake";

export function createWakeLock({
  nav = globalThis.navigator,
  doc = globalThis.document,
  storage = globalThis.localStorage,
  onChange = () => {},
} = {}) {
  let lock = null;
  let serving = false;          // the page serves the kernel's GPU work: only then is a lock worth holding
  let state = "off";
  let chosen = false;
  try { chosen = !!storage && storage.getItem(KEY) === "1"; } catch { /* no storage: not chosen */ }
  const wanted = () => chosen;
  const set = (s) => {
    if (s !== state) { state = s; onChange(s); }
  };

  async function acquire() {
    if (!wanted()) { set("off"); return; }
    if (!nav || !nav.wakeLock) { set("unsupported: this browser has no Screen Wake Lock"); return; }
    if (lock || !serving || !doc || doc.visibilityState !== "visible") return;
    try {
      const l = await nav.wakeLock.request("screen");
      lock = l;
      l.addEventListener("release", () => {
        if (lock === l) lock = null;
        if (state === "held") set("released while the tab was hidden");
      });
      set("held");
    } catch (e) {
      set(`refused: ${(e && (e.message || e.name)) || e}`);
    }
  }

  async function release() {
    const l = lock;
    lock = null;
    if (l) { try { await l.release(); } catch { /* already released */ } }
  }

  return {
    get state() { return state; },
    wanted,
    // the user's choice, from the checkbox: kept, and acted on at once
    async choose(on) {
      chosen = !!on;
      try { if (storage) storage.setItem(KEY, on ? "1" : "0"); } catch { /* no storage: this page only */ }
      if (on) { await acquire(); } else { await release(); set("off"); }
    },
    // the page starts serving the kernel (its first GPU message)
    async serve() { serving = true; await acquire(); },
    // document.visibilitychange
    async visibility() { if (doc && doc.visibilityState === "visible") await acquire(); },
  };
}
