"""Real handwritten digits with no download: scikit-learn's bundled 8x8 set, resampled to MNIST's 28x28.

The case studies need a *real* (not synthetic) digit set that works offline and loads in well
under a second. scikit-learn ships 1797 8x8 digits inside the package; upsampled to 28x28 they
drop into any MNIST-shaped model. ``repeat`` tiles jittered copies when a workload needs more
steps per epoch than 1.4k training images give.
"""

from __future__ import annotations

import numpy as np

from .image_folder import resize
from .mnist import Split

__all__ = ["load_digits_28x28"]

_MAX_SHIFT = 2
_NOISE_STD = 0.05


def _stratified_split(
    labels: np.ndarray, test_fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Indices of train/test, ``test_fraction`` of every class in test, chosen by ``rng``."""
    train, test = [], []
    for cls in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == cls))
        n_test = round(test_fraction * len(members))
        test.append(members[:n_test])
        train.append(members[n_test:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def _jitter(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Random integer shifts of up to ``_MAX_SHIFT`` pixels (zero fill) plus clipped Gaussian noise."""
    n, h, w = images.shape
    m = _MAX_SHIFT
    padded = np.pad(images, ((0, 0), (m, m), (m, m)))
    shifts = rng.integers(-m, m + 1, size=(n, 2))
    out = np.empty_like(images)
    for dy in range(-m, m + 1):
        for dx in range(-m, m + 1):
            idx = np.flatnonzero((shifts[:, 0] == dy) & (shifts[:, 1] == dx))
            if idx.size:
                out[idx] = padded[idx, m - dy : m - dy + h, m - dx : m - dx + w]
    out += rng.normal(0.0, _NOISE_STD, size=out.shape).astype(np.float32)
    return np.clip(out, 0.0, 1.0, out=out)


def _tile(
    images: np.ndarray, labels: np.ndarray, repeat: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The clean images followed by ``repeat - 1`` jittered copies, shuffled together."""
    xs = [images] + [_jitter(images, rng) for _ in range(repeat - 1)]
    x = np.concatenate(xs)
    y = np.tile(labels, repeat)
    order = rng.permutation(len(x))
    return np.ascontiguousarray(x[order]), y[order]


def load_digits_28x28(*, seed: int = 0, repeat: int = 1, test_fraction: float = 0.2) -> Split:
    """scikit-learn's 1797 digits as float32 ``(n, 28, 28)`` in [0, 1], int64 labels 0..9.

    The split is stratified (``test_fraction`` of each class) and fixed by ``seed``. With
    ``repeat > 1`` each half grows to ``repeat`` times its size with shifted, noisy copies; copies of
    a test digit stay in test, so the test score is not inflated by near-duplicates seen in training.
    """
    if repeat < 1:
        raise ValueError(f"load_digits_28x28: repeat must be >= 1, got {repeat}")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"load_digits_28x28: test_fraction must be in (0, 1), got {test_fraction}")
    from sklearn.datasets import load_digits  # local: keeps `import workbench.datasets` fast

    bunch = load_digits()
    images = resize(bunch.images.astype(np.float32) / np.float32(16.0), (28, 28))
    images = np.clip(images, 0.0, 1.0)
    labels = bunch.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    train_idx, test_idx = _stratified_split(labels, test_fraction, rng)
    x_train, y_train = _tile(images[train_idx], labels[train_idx], repeat, rng)
    x_test, y_test = _tile(images[test_idx], labels[test_idx], repeat, rng)
    return Split(x_train, y_train, x_test, y_test)
