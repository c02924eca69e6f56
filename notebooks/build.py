"""Writes the example notebooks (notebooks/*.ipynb) from the cells below: `python notebooks/build.py`.

Why a generator: the .ipynb files are JSON that nobody edits by hand; the cells live here as plain text,
reviewed as code, and the notebooks are rebuilt without outputs. Each notebook reads
SCELLIS_EXAMPLE_STEPS (steps to train, small in tests) and runs on any device (SCELLIS_DEVICE).
"""
from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

STEPS = 'import os\nSTEPS = int(os.environ.get("SCELLIS_EXAMPLE_STEPS", "{n}"))'

NOTEBOOKS = {
    "quickstart": [
        "# Quickstart: digits\n\nA spec in a cell, planned before any compute, trained in the background while "
        "the notebook stays usable, then evaluated and verified. The arrays come from the notebook itself.",
        "%load_ext scellis_jupyter\n" + STEPS.format(n=300),
        "from sklearn.datasets import load_digits\nimport numpy as np\n\nX, y = load_digits(return_X_y=True)\n"
        "rng = np.random.default_rng(0)\norder = rng.permutation(len(X))\nX, y = X[order], y[order]\n"
        "X_train, y_train = X[:1400], y[:1400]\nX_val, y_val = X[1400:1600], y[1400:1600]\n"
        "X_test, y_test = X[1600:], y[1600:]",
        "%%scellis digits\n# the same TOML as a spec file; names on the right are variables of this notebook\n"
        "[data]\ntrain = \"X_train, y_train\"\nval = \"X_val, y_val\"\ntest = \"X_test, y_test\"\n"
        "standardize = true          # mean and std of the training rows, kept in the run record\n\n[model]\nnodes = [\n"
        "  { name = \"hidden\", op = \"linear\", out = 64 },\n  { op = \"relu\" },\n"
        "  { name = \"logits\", op = \"linear\", out = 10 },\n]\n\n[recipe]\nbatch_size = 32\n"
        "optimizer = { name = \"adam\", lr = 0.005 }\nmetrics = [\"accuracy\"]\neval_every = 20",
        "%scellis train digits --steps $STEPS --checkpoint-every 100",
        "# other cells keep working while it trains\ndigits.run",
        "%scellis wait digits",
        "pred = digits.predict(X_test).argmax(1)      # the training statistics are applied\n"
        "print(f\"test accuracy {(pred == y_test).mean():.3f}\")",
        "%scellis verify digits",
    ],
    "dataframe": [
        "# Your own DataFrame\n\nA pandas DataFrame with a text label column, split the way you want. "
        "Every other column is a feature; `target` names the label.",
        "%load_ext scellis_jupyter\n" + STEPS.format(n=200),
        "import pandas as pd\nfrom sklearn.datasets import load_wine\n\nwine = load_wine(as_frame=True)\n"
        "df = wine.frame.rename(columns={\"target\": \"label\"})\n"
        "df[\"label\"] = df[\"label\"].map({0: \"barolo\", 1: \"grignolino\", 2: \"barbera\"})\n"
        "df = df.sample(frac=1.0, random_state=0).reset_index(drop=True)\n"
        "df_train, df_val = df.iloc[:140], df.iloc[140:]\ndf_train.head()",
        "%%scellis wine\n[data]\ntrain = \"df_train\"\nval = \"df_val\"\ntarget = \"label\"\nstandardize = true\n\n"
        "[model]\nnodes = [{ op = \"linear\", out = 32 }, { op = \"relu\" }, { op = \"linear\", out = 3 }]\n\n"
        "[recipe]\nbatch_size = 16\noptimizer = { name = \"adam\", lr = 0.01 }\nmetrics = [\"accuracy\"]",
        "%scellis train wine --steps $STEPS --wait",
        "print(\"validation:\", wine.evaluate(\"val\"))\nclasses = wine.spec.memory.classes\n"
        "print([classes[i] for i in wine.predict(df_val.head(5)).argmax(1)], list(df_val.label.head(5)))",
    ],
    "memory_plans": [
        "# Memory plans: green, yellow, red\n\nThe plan is the training step's own allocation plan, read before any "
        "compute. Below, one model is planned against three capacities. (The verdict answers \"does it fit\" "
        "alone; on the CPU path the plan's device line says it is the slow CPU path.)",
        "%load_ext scellis_jupyter\nimport scellis_jupyter as sc\nfrom scellis_jupyter.spec.edit import apply_fix",
        "%%scellis wide --no-plan\n[data]\ndataset = \"digits\"\n\n[model]\nnodes = [\n"
        "  { op = \"linear\", out = 512 }, { op = \"relu\" },\n  { op = \"linear\", out = 512 }, { op = \"relu\" },\n"
        "  { op = \"linear\", out = 10 },\n]\n\n[recipe]\nbatch_size = 256",
        "need = wide.plan().peak_bytes\nroomy, tight, small = int(need / 0.5), int(need / 0.9), int(need * 0.9)\n"
        "print(need, roomy, tight, small)",
        "%scellis plan wide --memory {roomy}",
        "%scellis plan wide --memory {tight}",
        "%scellis plan wide --memory {small}",
        "# apply a fix through the Python API: the spec text changes, and the new plan fits\n"
        "red = sc.plan(wide.spec, memory=small)\nfix = next(f for f in red.fixes if f.kind == \"batch_size\")\n"
        "fixed_text = apply_fix(wide.text, fix)\nfixed = sc.plan(sc.Spec.from_text(fixed_text), memory=small)\n"
        "print(red.verdict, '->', fixed.verdict, fix.description)\nprint(fixed.table())",
    ],
    "transformer": [
        "# A transformer from scratch\n\nA causal character-level transformer on CPython's pydoc topics text.",
        "%load_ext scellis_jupyter\n" + STEPS.format(n=200),
        "%%scellis chars\n[data]\ndataset = \"pydoc_topics\"\nseq_len = 32\n\n[model]\nnodes = [\n"
        "  { op = \"embedding\", vocab = 96, dim = 32 },\n  { op = \"positional_embedding\", max_len = 32 },\n"
        "  { op = \"transformer_block\", heads = 4, causal = true },\n  { op = \"layer_norm\" },\n"
        "  { op = \"linear\", out = 96 },\n]\n\n[recipe]\noptimizer = { name = \"adam\", lr = 3e-3 }\nbatch_size = 8",
        "%scellis train chars --steps $STEPS",
        "%scellis wait chars",
        "%scellis profile chars",
    ],
    "minilm_lora": [
        "# MiniLM with LoRA and QLoRA\n\nThe pretrained all-MiniLM-L6-v2 (weights from a pip package), a new "
        "4-way head, and adapters: LoRA (rank 8) and QLoRA (NF4 base weights). The plans show what each trains.",
        "%load_ext scellis_jupyter\n" + STEPS.format(n=20) + "\n"
        "from pathlib import Path\nimport scellis_jupyter\n"
        "MINILM = (Path(scellis_jupyter.__file__).parent.parent / \"benchmarks/specs/minilm_lora.toml\")",
        "from IPython import get_ipython\nfor name, method in ((\"lora\", \"lora\"), (\"qlora\", \"qlora\")):\n"
        "    text = MINILM.read_text().replace('method = \"lora\"', f'method = \"{method}\"')\n"
        "    get_ipython().run_cell_magic(\"scellis\", f\"{name} --no-graph\", text)",
        "%scellis train lora --steps $STEPS --wait",
        "%scellis train qlora --steps $STEPS --wait",
    ],
    "user_optimizer": [
        "# A user-written optimizer\n\nA catalog entry written in a cell: signSGD (Bernstein et al. 2018), "
        "registered through the same registry and conformance checks as the built-ins, then used by name.",
        "%load_ext scellis_jupyter\n" + STEPS.format(n=150),
        "%%scellis catalog optimizer sign_sgd\nfrom scellis_jupyter.catalog import Param, optimizer\n"
        "from scellis_jupyter.graph import functional as F\n\n\n"
        "@optimizer(\"sign_sgd\", summary=\"signSGD: step by the sign of the gradient\", params={\n"
        "    \"lr\": Param(float, 0.01, lo=0.0, doc=\"step size\")})\nclass SignSGD:\n"
        "    def __init__(self, lr=0.01):\n        self.lr = lr\n\n    def state(self, shape, dtype):\n"
        "        return []\n\n    def update(self, p, g, state, step, lr):\n        x = F.cast(p, \"f32\")\n"
        "        return F.cast(F.sub(x, F.mul(F.cast(lr, \"f32\"), F.sign(F.cast(g, \"f32\")))), p.dtype), {}",
        "%%scellis iris\n[data]\ndataset = \"iris\"\nstandardize = true\n\n[model]\n"
        "nodes = [{ op = \"linear\", out = 16 }, { op = \"relu\" }, { op = \"linear\", out = 3 }]\n\n"
        "[recipe]\noptimizer = { name = \"sign_sgd\", lr = 0.01 }\nbatch_size = 16\nmetrics = [\"accuracy\"]",
        "%scellis train iris --steps $STEPS --wait",
    ],
    "gan": [
        "# A GAN on a ring of Gaussians\n\nTwo networks trained adversarially; the plan covers both.",
        "%load_ext scellis_jupyter\n" + STEPS.format(n=300),
        "%%scellis ring\n[data]\ndataset = \"synthetic_ring\"\nn_rows = 4000\n\n[model.generator]\n"
        "input = { shape = [8] }\nnodes = [\n  { op = \"linear\", out = 64 }, { op = \"relu\" },\n"
        "  { op = \"linear\", out = 2 },\n]\n\n[model.discriminator]\nnodes = [\n"
        "  { op = \"linear\", out = 64 }, { op = \"relu\" },\n  { op = \"linear\", out = 1 },\n]\n\n[recipe]\n"
        "kind = \"gan\"\nloss = \"non_saturating\"\nnoise = \"normal\"\n"
        "optimizer = { name = \"adam\", lr = 2e-3, betas = [0.5, 0.999] }\nbatch_size = 128",
        "%scellis train ring --steps $STEPS --wait",
    ],
    "pool_sweep": [
        "# A sweep on a pool of two workers\n\nA local Dask pool of two worker processes: a learning-rate by "
        "batch-size sweep fills the heatmap cell by cell as each run lands, then one model trains data-parallel "
        "(each worker takes half of every batch; gradients are reduced on the workers) with one shared loss curve, "
        "checked against the same spec trained on one device.",
        "%load_ext scellis_jupyter\nimport numpy as np\nimport scellis_jupyter as sc\n" + STEPS.format(n=40),
        "%scellis pool --workers 2",
        "%%scellis digits --quiet\nname = \"digits-sweep\"\n[data]\ndataset = \"digits\"\n"
        "split = { train = 0.8, val = 0.1, test = 0.1 }\n[model]\nnodes = [\n"
        "  { name = \"hidden\", op = \"linear\", out = 32 },\n  { op = \"relu\" },\n"
        "  { name = \"logits\", op = \"linear\", out = 10 },\n]\n[recipe]\n"
        "optimizer = { name = \"adam\", lr = 1e-2 }\nbatch_size = 32\nmetrics = [\"accuracy\"]\n"
        "determinism = \"debug\"",
        "%scellis sweep digits --grid optimizer.lr=1e-3,1e-2,5e-2 --grid batch_size=16,32 --steps $STEPS",
        "best = max(digits.sweep_result.value, key=lambda c: c[\"metrics\"][\"val_accuracy\"])\n"
        "print(\"best cell:\", best[\"params\"], f\"val_accuracy {best['metrics']['val_accuracy']:.3f}\")",
        "from scellis_jupyter.pool.parallel import DataParallel\nfrom scellis_jupyter.jupyter.widgets import LossCurve\n\n"
        "dp = DataParallel(pool, digits.spec, slices=2, steps=STEPS)   # each worker: half of every batch\n"
        "curve = LossCurve(title=\"data-parallel over 2 workers\")\ncurve.follow(dp, key=\"2 workers\")\n"
        "display(curve)\nlosses = dp.train()\nprint(f\"{len(losses)} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}\")",
        "single = sc.Run(digits.spec, device=\"reference\", steps=STEPS)\nsingle.run_to_end()\n"
        "gap = np.max(np.abs(np.array(losses) - single.loss_history) / np.array(single.loss_history))\n"
        "print(f\"largest relative gap to the one-device run: {gap:.1e}\")\n"
        "print(\"replicas identical:\", len(set(dp.replica_hashes().values())) == 1)",
        "%scellis pool --close",
    ],
    "federated_digits": [
        "# Federated digits: three sites, FedAvg then FedProx\n\nThree sites on three local worker processes "
        "(a `Pool(workers=3)`), each holding a strongly non-IID share of the digits (label skew: most of a "
        "class lives on one site). Each site reads its own file on its own worker; only model updates travel. "
        "FedAvg runs first, then FedProx (its proximal term pulls each site's model toward the server's), each "
        "with a live RoundMonitor. Last, the same sites under differential privacy: the privacy ledger only "
        "grows and refuses the round that would overspend the declared (ε, δ). With three sites, site-level DP "
        "costs most of the accuracy: it is a guarantee, and it pays off with many sites, not three.",
        "import os\nimport numpy as np\nfrom sklearn.datasets import load_digits\nimport scellis_jupyter as sc\n"
        "from scellis_jupyter.federated.splits import label_skew_split\n"
        "from scellis_jupyter.jupyter.widgets import RoundMonitorView\n"
        "ROUNDS = int(os.environ.get(\"SCELLIS_EXAMPLE_STEPS\", \"15\"))      # federated rounds (small in tests)",
        "X, y = load_digits(return_X_y=True)\nX, y = (X / 16).astype(np.float32), y.astype(np.int64)\n"
        "order = np.random.default_rng(0).permutation(len(X))\nX, y = X[order], y[order]\n"
        "X_train, y_train, X_test, y_test = X[:1500], y[:1500], X[1500:], y[1500:]   # the test rows stay here\n\n"
        "sites = {}\nfor i, rows in enumerate(label_skew_split(y_train, 3, alpha=0.3, seed=0)):\n"
        "    path = f\"site{i}.npz\"                 # stands in for a file on that site's own machine\n"
        "    np.savez(path, x=X_train[rows], y=y_train[rows])\n    sites[f\"site{i}\"] = path\n"
        "    print(f\"site{i}: {len(rows):4d} rows, per class {np.bincount(y_train[rows], minlength=10).tolist()}\")",
        "pool = sc.Pool(workers=3)              # three local worker processes, one site on each\npool",
        "SPEC = \"\"\"\nname = \"federated-digits\"\n[model]\nnodes = [\n  { op = \"linear\", out = 32 },\n"
        "  { op = \"relu\" },\n  { name = \"logits\", op = \"linear\", out = 10 },\n]\n[recipe]\n"
        "loss = \"cross_entropy\"\noptimizer = { name = \"sgd\", lr = 0.1 }\nbatch_size = 32\n"
        "determinism = \"debug\"\nseed = 0\n\"\"\"\n\n"
        "fedavg = sc.Federation(pool, SPEC, sites, strategy=\"fedavg\", local_steps=10)\n"
        "monitor = RoundMonitorView(fedavg, metric=\"accuracy\", rounds=ROUNDS)\ndisplay(monitor)\n"
        "fedavg.fit(ROUNDS, evaluate=lambda w: {\"accuracy\": fedavg.accuracy(X_test, y_test, w)})\n"
        "print(f\"FedAvg after {ROUNDS} rounds: test accuracy {fedavg.rounds[-1].metrics['accuracy']:.3f}\")",
        "fedprox = sc.Federation(pool, SPEC, sites, strategy=\"fedprox\", params={\"mu\": 0.1, \"lr\": 0.1}, "
        "local_steps=10)\nmonitor = RoundMonitorView(fedprox, metric=\"accuracy\", rounds=ROUNDS)\ndisplay(monitor)\n"
        "fedprox.fit(ROUNDS, evaluate=lambda w: {\"accuracy\": fedprox.accuracy(X_test, y_test, w)})\n"
        "for name, f in ((\"FedAvg\", fedavg), (\"FedProx\", fedprox)):\n"
        "    print(f\"{name:8s} test accuracy per round: {[round(r.metrics['accuracy'], 3) for r in f.rounds]}\")",
        "# differential privacy: each site's update clipped to norm 1, Gaussian noise (sigma = 2) on the sum,\n"
        "# accounted by dp-accounting's RDP accountant against a declared budget of eps = 4.5 at delta = 1e-5\n"
        "private = sc.Federation(pool, SPEC, sites, strategy=\"fedavg\", local_steps=10,\n"
        "                        privacy=sc.Privacy(epsilon=4.5, delta=1e-5, clip=1.0, noise_multiplier=2.0))\n"
        "monitor = RoundMonitorView(private, metric=\"accuracy\", rounds=5)\ndisplay(monitor)\ntry:\n"
        "    private.fit(5, evaluate=lambda w: {\"accuracy\": private.accuracy(X_test, y_test, w)})\n"
        "except sc.PrivacyBudgetExceeded as e:\n    print(e.diagnostic.format())",
        "# the privacy ledger: one entry per released round, only ever appended\nprint(private.ledger)\n"
        "for e in private.ledger.entries:\n"
        "    print(f\"{e['what']:>8s}: noise multiplier {e['noise_multiplier']:g}, eps spent {e['epsilon']:.3f}\")",
        "for f in (fedavg, fedprox, private):\n    f.close()             # the sites forget their rows\npool.close()",
    ],
}


def build(out: Path = HERE) -> list[Path]:
    paths = []
    for name, cells in NOTEBOOKS.items():
        nb = new_notebook(metadata={"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                                    "language_info": {"name": "python"}})
        nb.cells = [new_markdown_cell(cells[0])] + [new_code_cell(c) for c in cells[1:]]
        for i, c in enumerate(nb.cells):            # stable ids: a rebuild changes nothing unless a cell did
            c.id = f"{name}-{i}"
        p = out / f"{name}.ipynb"
        nbformat.write(nb, p)
        paths.append(p)
    return paths


if __name__ == "__main__":
    for p in build():
        print(p)
