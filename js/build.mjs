// Bundle every widget's ES module into scellis_jupyter/static/ (one small module per widget, so a saved
// notebook repeats only what each widget needs), and copy ELK's worker, which the kernel sends on request.
import { build } from "esbuild";
import { copyFileSync, mkdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] || resolve(here, "../scellis_jupyter/static"));
export const WIDGETS = ["plan_view", "loss_curve", "run_panel", "graph_view", "catalog_browser", "lr_finder_view",
  "heatmap_view", "round_monitor", "profile_view", "gpu_device"];
mkdirSync(out, { recursive: true });
await build({
  entryPoints: WIDGETS.map((w) => resolve(here, "src", `${w}.js`)),
  bundle: true, format: "esm", minify: true, target: "es2020", outdir: out, logLevel: "warning",
  legalComments: "none",
});
copyFileSync(resolve(here, "node_modules/elkjs/lib/elk-worker.min.js"), resolve(out, "elk-worker.min.js"));
console.log(`bundled ${WIDGETS.length} widgets into ${out}`);
