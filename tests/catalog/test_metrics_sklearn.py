"""Metric entries against independent references, each accumulated over three uneven batches.

References: scikit-learn (accuracy_score, top_k_accuracy_score, precision/recall/f1_score in every average
mode, confusion_matrix, roc_auc_score with multi_class="ovr" / average="macro", average_precision_score,
brier_score_loss), PyTorch's cross_entropy for perplexity, and the ECE formula written out below as an
explicit loop over samples and bins. Probabilities for the references come from scipy.special (softmax,
expit), not from our helpers. Tolerance: rtol 1e-12 on every float result; confusion counts are equal
exactly, and the accumulated state of counting metrics equals the one-batch state exactly.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit, softmax
from sklearn import metrics as skm
from sklearn.preprocessing import label_binarize

from scellis_jupyter import catalog

RTOL = 1e-12
SPLITS = (13, 90)                 # batches [0:13], [13:90], [90:]


def multiclass(seed=0, n=157, c=6, absent=(5,)):
    """Logits (n, c) better than chance; the classes in `absent` occur neither as targets nor predictions."""
    rng = np.random.default_rng(seed)
    present = [k for k in range(c) if k not in absent]
    t = rng.choice(present, n)
    z = rng.standard_normal((n, c)) + 1.2 * np.eye(c)[t]
    z[:, list(absent)] = -50.0
    return z, t


def binary(seed=1, n=157):
    rng = np.random.default_rng(seed)
    t = rng.integers(0, 2, n)
    return rng.standard_normal(n) + (t - 0.5), t


def ours(name, z, t, splits=SPLITS, **hyper):
    m = catalog.make("metric", name, **hyper)
    a, b = splits
    for sl in (slice(0, a), slice(a, b), slice(b, None)):
        m.update(z[sl], t[sl])
    return m.compute()


def close(a, b):
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=0)


# ---- counting metrics ---------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 2, 3])
def test_top_k_accuracy(k):
    z, t = multiclass()
    close(ours("accuracy", z, t, top_k=k), skm.top_k_accuracy_score(t, z, k=k, labels=range(z.shape[1])))


def test_accuracy_multiclass_and_binary():
    z, t = multiclass()
    close(ours("accuracy", z, t), skm.accuracy_score(t, z.argmax(1)))
    zb, tb = binary()
    close(ours("accuracy", zb, tb), skm.accuracy_score(tb, zb > 0))
    close(ours("accuracy", zb[:, None], tb), skm.accuracy_score(tb, zb > 0))     # (N, 1) is binary too


SK = {"precision": skm.precision_score, "recall": skm.recall_score, "f1": skm.f1_score}


@pytest.mark.parametrize("name", sorted(SK))
@pytest.mark.parametrize("average", ["macro", "micro", "weighted"])
@pytest.mark.parametrize("zero_division", [0.0, 1.0])
def test_prf_multiclass(name, average, zero_division):
    z, t = multiclass()
    z[:, 3] -= 40.0            # class 3 is a target but never predicted: precision 0/0
    pred = z.argmax(1)
    assert 3 in t and 3 not in pred
    want = SK[name](t, pred, average=average, zero_division=zero_division)
    close(ours(name, z, t, average=average, zero_division=zero_division), want)


@pytest.mark.parametrize("name", sorted(SK))
@pytest.mark.parametrize("pos_label", [0, 1])
def test_prf_binary(name, pos_label):
    zb, tb = binary()
    want = SK[name](tb, (zb > 0).astype(int), average="binary", pos_label=pos_label)
    close(ours(name, zb, tb, average="binary", pos_label=pos_label), want)
    z2 = np.stack([np.zeros_like(zb), zb], 1)             # the same model as two-class logits
    close(ours(name, z2, tb, average="binary", pos_label=pos_label), want)


def test_binary_average_needs_two_classes():
    z, t = multiclass()
    with pytest.raises(catalog.CatalogError, match="binary.*2 classes.*6"):
        ours("f1", z, t, average="binary")


@pytest.mark.parametrize("normalize", ["none", "true", "pred", "all"])
def test_confusion_matrix(normalize):
    z, t = multiclass(absent=())
    got = ours("confusion_matrix", z, t, normalize=normalize)
    want = skm.confusion_matrix(t, z.argmax(1), labels=range(z.shape[1]),
                                normalize=None if normalize == "none" else normalize)
    if normalize == "none":
        assert got.dtype.kind == "i" and np.array_equal(got, want)
    else:
        close(got, want)


def test_counting_state_is_exact_over_batches():
    z, t = multiclass()
    one = catalog.make("metric", "confusion_matrix")
    one.update(z, t)
    many = catalog.make("metric", "confusion_matrix")
    for i in range(0, len(t), 10):
        many.update(z[i:i + 10], t[i:i + 10])
    assert np.array_equal(one.state_dict()["cm"], many.state_dict()["cm"])
    a = catalog.make("metric", "accuracy")
    a.update(z, t)
    b = catalog.make("metric", "accuracy")
    for i in range(0, len(t), 7):
        b.update(z[i:i + 7], t[i:i + 7])
    assert a.compute() == b.compute()


# ---- ranking metrics ----------------------------------------------------------------------------------
@pytest.mark.parametrize("ties", [False, True])
def test_auroc(ties):
    z, t = multiclass(absent=())
    zb, tb = binary()
    if ties:                                               # coarse logits: many tied scores
        z, zb = np.round(z * 2) / 2, np.round(zb * 2) / 2
    close(ours("auroc", z, t), skm.roc_auc_score(t, softmax(z, axis=1), multi_class="ovr", average="macro"))
    close(ours("auroc", zb, tb), skm.roc_auc_score(tb, expit(zb)))
    z2 = np.stack([np.zeros_like(zb), zb], 1)
    close(ours("auroc", z2, tb), skm.roc_auc_score(tb, softmax(z2, axis=1)[:, 1]))


@pytest.mark.parametrize("ties", [False, True])
def test_auprc(ties):
    z, t = multiclass(absent=())
    zb, tb = binary()
    if ties:
        z, zb = np.round(z * 2) / 2, np.round(zb * 2) / 2
    close(ours("auprc", zb, tb), skm.average_precision_score(tb, expit(zb)))
    y = label_binarize(t, classes=range(z.shape[1]))
    close(ours("auprc", z, t), skm.average_precision_score(y, softmax(z, axis=1), average="macro"))


def test_auroc_undefined_for_an_absent_class():
    z, t = multiclass(absent=(5,))
    z[:, 5] = 0.0
    with pytest.raises(catalog.CatalogError, match="class 5"):
        ours("auroc", z, t)


# ---- probabilistic metrics ----------------------------------------------------------------------------
def test_brier():
    zb, tb = binary()
    close(ours("brier", zb, tb), skm.brier_score_loss(tb, expit(zb)))
    z, t = multiclass(absent=())
    p = softmax(z, axis=1)
    close(ours("brier", z, t), skm.brier_score_loss(t, p, labels=range(z.shape[1]), scale_by_half=False))


def ece_by_the_formula(p, t, n_bins):
    """sum_b |B_b| / n * |acc(B_b) - conf(B_b)|, bin b = (b/n_bins, (b+1)/n_bins], one sample at a time."""
    n = len(t)
    total = 0.0
    for b in range(n_bins):
        lo, hi = b / n_bins, (b + 1) / n_bins
        members = [i for i in range(n) if lo < p[i].max() <= hi]
        if not members:
            continue
        acc = sum(1.0 for i in members if int(np.argmax(p[i])) == t[i]) / len(members)
        conf = sum(float(p[i].max()) for i in members) / len(members)
        total += len(members) / n * abs(acc - conf)
    return total


@pytest.mark.parametrize("n_bins", [1, 10, 15])
def test_ece(n_bins):
    z, t = multiclass(absent=())
    close(ours("ece", z, t, n_bins=n_bins), ece_by_the_formula(softmax(z, axis=1), t, n_bins))
    zb, tb = binary()
    pb = np.stack([1 - expit(zb), expit(zb)], 1)
    close(ours("ece", zb, tb, n_bins=n_bins), ece_by_the_formula(pb, tb, n_bins))


def test_perplexity_against_torch_cross_entropy():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    z = rng.standard_normal((9, 11, 7)) * 3
    t = rng.integers(0, 7, (9, 11))
    t[rng.random((9, 11)) < 0.2] = -100                       # padding
    ce = torch.nn.functional.cross_entropy(torch.tensor(z).reshape(-1, 7), torch.tensor(t).reshape(-1),
                                           ignore_index=-100)
    close(ours("perplexity", z, t, splits=(2, 6)), float(torch.exp(ce)))
    t2 = np.where(t == -100, 3, t)                            # another ignore_index, and (N, C) logits
    t2[0, :4] = 6
    ce2 = torch.nn.functional.cross_entropy(torch.tensor(z).reshape(-1, 7), torch.tensor(t2).reshape(-1),
                                            ignore_index=6)
    close(ours("perplexity", z.reshape(-1, 7), t2.reshape(-1), splits=(5, 60), ignore_index=6),
          float(torch.exp(ce2)))


# ---- bad input ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["accuracy", "f1", "precision", "recall", "confusion_matrix", "auroc", "auprc",
                                  "ece", "brier", "perplexity"])
def test_bad_input_is_a_clear_error(name):
    z, _ = multiclass(n=10, absent=())
    t = np.arange(10) % 6                     # every class occurs (AUROC needs it)
    m = catalog.make("metric", name)
    with pytest.raises(catalog.CatalogError) as e:
        m.compute()
    assert name in str(e.value) and "before any update" in str(e.value)
    with pytest.raises(catalog.CatalogError) as e:
        m.update(z, t[:7])
    assert name in str(e.value) and "(10, 6)" in str(e.value) and "(7,)" in str(e.value)
    bad = t.copy()
    bad[3] = 6
    with pytest.raises(catalog.CatalogError) as e:
        m.update(z, bad)
    assert name in str(e.value) and "out of range" in str(e.value) and "(10, 6)" in str(e.value)
    zn = z.copy()
    zn[2, 1] = np.nan
    with pytest.raises(catalog.CatalogError) as e:
        m.update(zn, t)
    assert name in str(e.value) and "NaN" in str(e.value)
    m.update(z, t)                    # refused batches left no trace
    one = catalog.make("metric", name)
    one.update(z, t)
    assert np.array_equal(m.compute(), one.compute())


def test_class_count_must_not_change_between_batches():
    z, t = multiclass(n=20, absent=())
    m = catalog.make("metric", "f1")
    m.update(z, t)
    with pytest.raises(catalog.CatalogError, match="same number of classes"):
        m.update(z[:, :4], np.minimum(t, 3))


def test_bad_hyperparameters_are_refused():
    with pytest.raises(catalog.CatalogError, match="did you mean 'macro'"):
        catalog.make("metric", "f1", average="marco")
    with pytest.raises(catalog.CatalogError, match="top_k"):
        catalog.make("metric", "accuracy", top_k=0)
    z, t = multiclass(n=20)
    with pytest.raises(catalog.CatalogError, match="top_k=7.*6 classes"):
        ours("accuracy", z, t, top_k=7)
