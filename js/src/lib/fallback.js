// The live view hides its static twin. Every Scellis widget is displayed as two outputs: the widget view and,
// right after it, a static text/html form (kept for nbconvert, repository hosts and other kernel-free
// viewers) marked `data-scellis-static="<_static_id>"`. Where the view renders, one <style> rule per widget
// hides that output (and any re-published copy of it, since a rule outlives the DOM node); when the last
// view of the widget goes, the rule goes and the static form shows again.
const live = new Map();

export function hideRule(id) {
  const sel = `[data-scellis-static="${id}"]`;
  return `.jp-OutputArea-child:has(${sel}),${sel}{display:none!important}`;
}

/** Hide the static output of widget `id` in `doc`; returns the function that undoes it (reference-counted). */
export function hideFallback(id, doc = globalThis.document) {
  if (!id || !/^[0-9a-f]+$/.test(id) || !doc?.head) return () => {};
  let entry = live.get(id);
  if (!entry) {
    const style = doc.createElement("style");
    style.setAttribute("data-scellis-hide", id);
    style.textContent = hideRule(id);
    doc.head.append(style);
    entry = { style, views: 0 };
    live.set(id, entry);
  }
  entry.views += 1;
  let done = false;
  return () => {
    if (done) return;
    done = true;
    entry.views -= 1;
    if (entry.views <= 0) {
      entry.style.remove();
      live.delete(id);
    }
  };
}

/** A widget's render wrapped so the view hides its static twin while it lives. */
export function withFallback(render) {
  return (ctx) => {
    const show = hideFallback(ctx.model.get("_static_id"));
    const cleanup = render(ctx);
    return () => { show(); if (typeof cleanup === "function") cleanup(); };
  };
}
