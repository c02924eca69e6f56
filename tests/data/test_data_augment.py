"""Augmentations and weighted sampling from the recipe: what they claim, drawn from the Philox streams.

Class-balanced sampling is checked by counting draws on an imbalanced dataset (chi-square against equal
class frequencies); class weights by their ratio. Each augmentation is checked against its definition:
gaussian noise has the stated standard deviation and is normal (KS test), a shift moves the whole image
by at most `pixels` with zeros shifted in, a flip mirrors left-right with probability p. Draws replay
from the same stream position.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from scellis_jupyter.data import ArrayDataset, Batches
from scellis_jupyter.data.augment import check_augmentation, loader_options, sampling_weights, transforms
from scellis_jupyter.catalog import CatalogError
from scellis_jupyter.rng import Generator


def _imbalanced(n0=900, n1=80, n2=20):
    y = np.concatenate([np.zeros(n0), np.ones(n1), np.full(n2, 2)]).astype(np.int64)
    x = np.arange(len(y), dtype=np.float32).reshape(-1, 1)
    return ArrayDataset(x, y, name="imbalanced", task="classification")


def _count(loader, epochs):
    counts = np.zeros(3)
    for _ in range(epochs):
        for _, y in loader:
            counts += np.bincount(y, minlength=3)
    return counts


def test_balanced_sampling_balances_an_imbalanced_dataset():
    ds = _imbalanced()
    idx = np.arange(len(ds))
    plain = _count(Batches(ds, idx, 50, Generator(0), shuffle=True, drop_last=True), 1)
    assert plain.tolist() == [900, 80, 20]
    opts = loader_options({"sampling": "balanced"}, ds, idx, (1,), "f32")
    counts = _count(Batches(ds, idx, 50, Generator(0), shuffle=True, drop_last=True, **opts), 5)
    assert counts.sum() == 5000
    assert stats.chisquare(counts).pvalue > 1e-3, counts           # consistent with equal class frequencies
    assert counts.min() > 1500


def test_class_weights_set_the_draw_ratio():
    ds = _imbalanced(500, 500, 0)
    idx = np.arange(1000)
    opts = loader_options({"sampling": {"class_weights": [1.0, 3.0, 0.0]}}, ds, idx, (1,), "f32")
    counts = _count(Batches(ds, idx, 100, Generator(1), **opts), 10)
    p = counts[1] / counts.sum()
    assert abs(p - 0.75) < 4 * np.sqrt(0.75 * 0.25 / counts.sum()) and counts[2] == 0


def test_sampling_needs_labels():
    with pytest.raises(Exception, match="needs class labels"):
        sampling_weights("balanced", None)


def _stream(seed=0, pos=0):
    g = Generator(seed)
    g.positions["augment"] = pos
    return g, g.stream("augment")


def test_gaussian_noise_has_its_standard_deviation():
    (t,) = transforms([{"name": "gaussian_noise", "std": 0.3}], (8, 8))
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    g, s = _stream()
    out, _ = t(x, None, s)
    noise = (out - x).astype(np.float64).ravel() / 0.3
    assert stats.kstest(noise, "norm").pvalue > 1e-3
    assert abs(noise.std() - 1) < 0.03 and abs(noise.mean()) < 0.03
    _, s2 = _stream()
    assert np.array_equal(t(x, None, s2)[0], out)                  # the same position, the same noise
    assert np.array_equal(out, t(x, None, _stream(pos=0)[1])[0]) and not np.array_equal(out, t(x, None, s)[0])


def test_random_shift_moves_whole_images_with_zeros_shifted_in():
    (t,) = transforms([{"name": "random_shift", "pixels": 2}], (1, 8, 8))
    x = np.random.default_rng(1).uniform(1, 2, (200, 64)).astype(np.float32)   # no zeros in the images
    out, _ = t(x, None, _stream(3)[1])
    seen = set()
    for a, b in zip(x.reshape(-1, 8, 8), out.reshape(-1, 8, 8)):
        hits = []
        for dy in range(-2, 3):
            for dx in range(-2, 3):
                ref = np.zeros_like(a)
                ref[max(dy, 0):8 + min(dy, 0), max(dx, 0):8 + min(dx, 0)] = \
                    a[max(-dy, 0):8 + min(-dy, 0), max(-dx, 0):8 + min(-dx, 0)]
                if np.array_equal(ref, b):
                    hits.append((dy, dx))
        assert len(hits) == 1
        seen.add(hits[0])
    assert len(seen) == 25                                          # every shift in [-2, 2]^2 occurs


def test_hflip_mirrors_with_probability_prob():
    (t,) = transforms([{"name": "hflip", "prob": 0.3}], (2, 4, 5))
    x = np.random.default_rng(2).standard_normal((2000, 40)).astype(np.float32)
    out, y = t(x, np.arange(2000), _stream(4)[1])
    a, b = x.reshape(-1, 2, 4, 5), out.reshape(-1, 2, 4, 5)
    flipped = np.array([np.array_equal(q, p[..., ::-1]) for p, q in zip(a, b)])
    kept = np.array([np.array_equal(q, p) for p, q in zip(a, b)])
    assert np.all(flipped ^ kept) and np.array_equal(y, np.arange(2000))
    assert abs(flipped.mean() - 0.3) < 4 * np.sqrt(0.3 * 0.7 / 2000)


def test_augmentations_in_the_loader_replay_after_a_resume():
    ds = ArrayDataset(np.random.default_rng(0).standard_normal((96, 16)).astype(np.float32), np.arange(96) % 3,
                      name="a", task="classification")
    aug = transforms([{"name": "gaussian_noise"}, {"name": "random_shift"}, {"name": "hflip"}], (1, 4, 4))
    gen = Generator(5)
    whole = Batches(ds, None, 16, gen, transforms=aug)
    batches = [x for x, _ in whole]
    gen2 = Generator(5)
    part = Batches(ds, None, 16, gen2, transforms=aug)
    it = iter(part)
    first = [next(it)[0] for _ in range(2)]
    state, gstate = part.state_dict(), gen2.state_dict()
    g3 = Generator.from_state(gstate)
    rest = Batches(ds, None, 16, g3, transforms=aug)
    rest.load_state_dict(state)
    got = first + [x for x, _ in rest]
    assert all(np.array_equal(a, b) for a, b in zip(got, batches)) and len(got) == len(batches)


@pytest.mark.parametrize("cfg,shape,msg", [
    ({"name": "hflp"}, (1, 4, 4), "did you mean 'hflip'"),
    ({"name": "hflip", "porb": 0.5}, (1, 4, 4), "did you mean 'prob'"),
    ({"name": "hflip", "prob": 1.5}, (1, 4, 4), "out of range [0, 1]"),
    ({"name": "gaussian_noise", "std": -1.0}, (4,), "out of range"),
    ({"name": "random_shift"}, (16,), "needs images"),
    ({"name": "random_shift", "pixels": 4}, (1, 4, 4), "not smaller than the image"),
])
def test_bad_augmentations_are_refused(cfg, shape, msg):
    with pytest.raises(CatalogError) as e:
        check_augmentation(cfg, shape, "f32")
    assert msg in str(e.value)
