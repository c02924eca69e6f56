// Redraw throttling: the first `immediate` calls run at once (a run's first points show without delay),
// later ones at most once per `interval` ms, and the last call is never lost (a trailing run is scheduled).
export function throttle(fn, { interval = 200, immediate = 3, now = () => Date.now(),
  schedule = (f, ms) => setTimeout(f, ms), cancel = (t) => clearTimeout(t) } = {}) {
  let calls = 0;
  let last = -Infinity;
  let timer = null;
  const fire = () => { timer = null; last = now(); fn(); };
  const t = () => {
    calls += 1;
    const dt = now() - last;
    if (calls <= immediate || dt >= interval) {
      if (timer !== null) { cancel(timer); timer = null; }
      fire();
    } else if (timer === null) {
      timer = schedule(fire, interval - dt);
    }
  };
  t.flush = () => { if (timer !== null) { cancel(timer); fire(); } };
  t.cancel = () => { if (timer !== null) { cancel(timer); timer = null; } };
  return t;
}
