"""A synthetic stand-in with the shape of MNIST, for runs with no data on disk.

Profiling a distributed training loop needs data of the right *shape* far more than real data,
but a model that cannot learn hides input-pipeline and convergence effects. So this set carries
class structure a small network picks up within an epoch, while costing nothing to obtain.
(The BigEarthNet-shaped ``synthetic_bigearthnet`` lives in ``bigearthnet.py``, next to its labels.)
"""

from __future__ import annotations

import numpy as np

from .mnist import Split

__all__ = ["mnist_prototypes", "synthetic_mnist"]

_PROTOTYPE_SEED = 20_240_601  # fixed: class k looks the same whatever the sample seed
_MAX_SHIFT = 2


def mnist_prototypes(num_classes: int = 10, size: int = 28) -> np.ndarray:
    """One ``(size, size)`` template per class: three Gaussian blobs, peak 1. Same on every call."""
    rng = np.random.default_rng(_PROTOTYPE_SEED)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    protos = np.zeros((num_classes, size, size), dtype=np.float32)
    lo, hi = size * 0.22, size * 0.78
    for k in range(num_classes):
        for _ in range(3):
            cy, cx = rng.uniform(lo, hi, size=2)
            sigma = rng.uniform(size * 0.05, size * 0.11)
            protos[k] += np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * sigma**2))
        protos[k] /= protos[k].max()
    return protos


def _shifted_prototypes(protos: np.ndarray) -> np.ndarray:
    """All integer shifts of every prototype: ``(classes, 2m+1, 2m+1, h, w)``."""
    m = _MAX_SHIFT
    k, h, w = protos.shape
    padded = np.pad(protos, ((0, 0), (m, m), (m, m)))
    out = np.empty((k, 2 * m + 1, 2 * m + 1, h, w), dtype=np.float32)
    for i, dy in enumerate(range(-m, m + 1)):
        for j, dx in enumerate(range(-m, m + 1)):
            out[:, i, j] = padded[:, m - dy : m - dy + h, m - dx : m - dx + w]
    return out


def _sample(
    n: int, shifted: np.ndarray, noise: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    num_classes, n_shift = shifted.shape[0], shifted.shape[1]
    labels = rng.permutation(np.arange(n, dtype=np.int64) % num_classes)  # balanced classes
    dy, dx = rng.integers(0, n_shift, size=(2, n))
    gain = rng.uniform(0.6, 1.0, size=(n, 1, 1)).astype(np.float32)
    images = shifted[labels, dy, dx] * gain
    images += np.float32(noise) * rng.standard_normal(size=images.shape, dtype=np.float32)
    np.clip(images, 0.0, 1.0, out=images)
    return images, labels


def synthetic_mnist(
    n_train: int = 60_000, n_test: int = 10_000, *, seed: int = 0, noise: float = 0.2
) -> Split:
    """MNIST-shaped float32 ``(n, 28, 28)`` in [0, 1] with balanced int64 labels 0..9.

    Each image is its class template (``mnist_prototypes``), shifted up to 2 pixels, scaled by a
    random gain and overlaid with Gaussian ``noise``: learnable, but not solved by one pixel.
    """
    if n_train < 0 or n_test < 0:
        raise ValueError(f"synthetic_mnist: sizes must be >= 0, got n_train={n_train}, n_test={n_test}")
    rng = np.random.default_rng(seed)
    shifted = _shifted_prototypes(mnist_prototypes())
    x_train, y_train = _sample(n_train, shifted, noise, rng)
    x_test, y_test = _sample(n_test, shifted, noise, rng)
    return Split(x_train, y_train, x_test, y_test)
