"""Federated benchmarks: FedAvg, FedProx and SCAFFOLD on digits over three sites, IID and strongly non-IID
(label skew, Dirichlet alpha), against central training with the same number of optimizer steps per site.

    python benchmarks/federated.py                 # prints the table
    python benchmarks/federated.py --alpha 0.1 --rounds 30
    python benchmarks/federated.py --dp 0.5 1.0 --clip 1.0     # + FedAvg with site-level DP on the IID split

Accuracy is on a held-out 20% of digits that no site holds (the coordinator's own test set). Local steps:
SGD lr 0.1, batch 32, `--steps` steps per site per round; FedProx and SCAFFOLD use the same local lr. The
Pool is in-process (one worker): the numbers are statistical (accuracy per round), not a speed claim.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scellis_jupyter.federated import Federation, Privacy  # noqa: E402
from scellis_jupyter.federated.splits import iid_split, label_skew_split  # noqa: E402
from scellis_jupyter.pool import Pool  # noqa: E402
from scellis_jupyter.run.run import Run  # noqa: E402

SPEC = """
name = "fed-digits-bench"
[model]
nodes = [{ op = "linear", out = 32 }, { op = "relu" }, { name = "logits", op = "linear", out = 10 }]
[recipe]
loss = "cross_entropy"
optimizer = { name = "sgd", lr = 0.1 }
batch_size = 32
determinism = "debug"
seed = 0
"""
LR = 0.1


def data():
    x, y = load_digits(return_X_y=True)
    x, y = (x / 16).astype(np.float32), y.astype(np.int64)
    perm = np.random.default_rng(0).permutation(len(x))
    te, tr = perm[: len(x) // 5], perm[len(x) // 5:]
    return x[tr], y[tr], x[te], y[te]


def central(x, y, xt, yt, steps: int) -> float:
    run = Run(SPEC.replace('name = "fed-digits-bench"', 'name = "central"\n[data]\nsplit = { train = 1.0 }'),
              device="reference", steps=steps, data={"train": (x, y)})
    run.run_to_end()
    return float(np.mean(np.asarray(run.predict(xt)).argmax(1) == yt))


def federate(pool, sites, xt, yt, strategy, params, rounds, steps, privacy=None):
    fed = Federation(pool, SPEC, sites, strategy=strategy, params=params, local_steps=steps, privacy=privacy)
    t = time.perf_counter()
    curve = [r.metrics["accuracy"] for r in fed.fit(rounds, evaluate=lambda w: {"accuracy": fed.accuracy(xt, yt, w)})]
    return curve, time.perf_counter() - t, (fed.ledger.spent if fed.ledger else None)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--alpha", type=float, default=0.1, help="Dirichlet label-skew concentration (small = skewed)")
    ap.add_argument("--mu", type=float, default=0.1, help="FedProx proximal weight")
    ap.add_argument("--dp", type=float, nargs="*", default=[], metavar="Z",
                    help="also FedAvg with DP on the IID split at these noise multipliers (clip --clip, delta 1e-5)")
    ap.add_argument("--clip", type=float, default=1.0)
    a = ap.parse_args(argv)
    x, y, xt, yt = data()
    acc_c = central(x, y, xt, yt, a.rounds * a.steps)
    splits = {"iid": iid_split(len(x), 3, seed=1), f"label skew a={a.alpha:g}": label_skew_split(y, 3, a.alpha, seed=0)}
    configs = [("fedavg", {}), ("fedprox", {"mu": a.mu, "lr": LR}), ("scaffold", {"lr": LR})]
    rows = []
    with Pool() as pool:
        for split_name, parts in splits.items():
            sites = {f"site{i}": (x[p], y[p]) for i, p in enumerate(parts)}
            skew = np.mean([max(np.sum(y[p] == c) for p in parts) / np.sum(y == c) for c in range(10)])
            runs = [(strat, params, None, strat + (f" mu={a.mu:g}" if strat == "fedprox" else ""))
                    for strat, params in configs]
            if split_name == "iid":
                runs += [("fedavg", {}, Privacy(1e6, 1e-5, clip=a.clip, noise_multiplier=z), f"fedavg DP z={z:g} C={a.clip:g}")
                         for z in a.dp]
            for strat, params, privacy, label in runs:
                curve, secs, eps = federate(pool, sites, xt, yt, strat, params, a.rounds, a.steps, privacy)
                to90 = next((i + 1 for i, v in enumerate(curve) if v >= 0.9 * acc_c), None)
                rows.append((split_name, f"{skew:.2f}", label, f"{curve[-1]:.4f}", f"{max(curve):.4f}",
                             f"{curve[-1] / acc_c:.3f}", str(to90) if to90 else f">{a.rounds}",
                             "-" if eps is None else f"{eps:.2f}", f"{secs:.1f}"))
    print(f"digits, 3 sites, {a.rounds} rounds x {a.steps} local SGD steps (lr {LR}, batch 32); central "
          f"{a.rounds * a.steps} steps: accuracy {acc_c:.4f}; sizes "
          + ", ".join(f"{k}: {[len(p) for p in v]}" for k, v in splits.items()))
    head = ("split", "class share", "strategy", "final acc", "best acc", "final/central", "rounds to 90% of central",
            "eps (delta 1e-5)", "seconds")
    w = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("| " + " | ".join(h.ljust(w[i]) for i, h in enumerate(head)) + " |")
    print("|" + "|".join("-" * (x + 2) for x in w) + "|")
    for r in rows:
        print("| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(r)) + " |")
    print("class share: mean over classes of the largest fraction of that class on one site (1/3 = IID, 1 = disjoint)")


if __name__ == "__main__":
    main()
