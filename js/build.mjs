// Bundle every widget's ES module into scellis_jupyter/static/ (one small module per widget, so a saved
// notebook repeats only what each widget needs), and copy ELK's worker, which the kernel sends on request.
// Then the JupyterLab extension (lab/: %%scellis cells highlighted as TOML, catalog cells as Python) into
// scellis_jupyter/labextensions/scellis-jupyter/, a prebuilt federated extension the wheel installs under
// share/jupyter/labextensions/scellis-jupyter/.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { basename, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] || resolve(here, "../scellis_jupyter/static"));
const labOut = resolve(process.argv[3] || resolve(here, "../scellis_jupyter/labextensions/scellis-jupyter"));
export const WIDGETS = ["plan_view", "loss_curve", "run_panel", "graph_view", "catalog_browser", "lr_finder_view",
  "heatmap_view", "round_monitor", "profile_view", "stage_explorer", "gpu_device"];
mkdirSync(out, { recursive: true });
await build({
  entryPoints: WIDGETS.map((w) => resolve(here, "src", `${w}.js`)),
  bundle: true, format: "esm", minify: true, target: "es2020", outdir: out, logLevel: "warning",
  legalComments: "none",
});
copyFileSync(resolve(here, "node_modules/elkjs/lib/elk-worker.min.js"), resolve(out, "elk-worker.min.js"));
console.log(`bundled ${WIDGETS.length} widgets into ${out}`);

// The lab extension: one script, named by its content hash (browsers may cache it), and the package.json
// JupyterLab's server reads (jupyterlab._build.load names the script; ./extension is what its container gets).
const LAB_NAME = "scellis-jupyter";
const versionPy = readFileSync(resolve(here, "../scellis_jupyter/_version.py"), "utf8");
const version = /__version__ = "([^"]+)"/.exec(versionPy)[1];
rmSync(labOut, { recursive: true, force: true });
const lab = await build({
  entryPoints: { remoteEntry: resolve(here, "lab", "remote_entry.js") },
  bundle: true, format: "iife", minify: true, target: "es2020", outdir: resolve(labOut, "static"),
  entryNames: "[name].[hash]", metafile: true, logLevel: "warning", legalComments: "none",
});
const entry = basename(Object.keys(lab.metafile.outputs).find((f) => f.endsWith(".js")));
writeFileSync(resolve(labOut, "package.json"), JSON.stringify({
  name: LAB_NAME, version,
  description: "Scellis for Jupyter: %%scellis cells highlighted as TOML, %%scellis catalog cells as Python",
  jupyterlab: { extension: true, _build: { load: `static/${entry}`, extension: "./extension" } },
}, null, 2) + "\n");
writeFileSync(resolve(labOut, "install.json"), JSON.stringify({
  packageManager: "python", packageName: "scellis-jupyter",
  uninstallInstructions: "Use your Python package manager (pip, conda, etc.) to uninstall the package scellis-jupyter",
}, null, 2) + "\n");
console.log(`built the JupyterLab extension into ${labOut}`);
