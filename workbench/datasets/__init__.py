"""Data for the case studies, from local files or generated: nothing in this package downloads.

The training runs profiled by workbench happen on cluster nodes without network access, so each
set is either bundled (scikit-learn's digits), generated (``synthetic_*``), or read from files the
user copied in (MNIST IDX / ``mnist.npz``, BigEarthNet patch folders, image folders) under
``data_root()``; without those, ``dataset_path(name)`` makes a reduced copy in the same on-disk
format (``ensure_reduced``). Files are decoded by Pillow and tifffile, imported on first use, and
nothing here imports TensorFlow, so importing this package stays cheap on every rank.

``load(preset_or_path)`` picks the MNIST-shaped source from one string, for notebooks and CLIs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .bigearthnet import (
    BAND_PIXELS,
    BANDS,
    LABELS_19,
    LABELS_43,
    Patches,
    load_bigearthnet_patches,
    read_tiff,
    synthetic_bigearthnet,
    write_bigearthnet_patch,
    write_tiff,
)
from .data_dir import DATA_ENV, REDUCED_SETS, data_root, dataset_path, ensure_reduced, mnist_path
from .digits import load_digits_28x28
from .image_folder import ImageFolder, load_image_folder, read_image, read_png, read_pnm, resize
from .mnist import Split, find_idx_files, load_mnist_idx, load_mnist_npz, read_idx, write_idx
from .synthetic import synthetic_mnist

__all__ = [
    "BANDS",
    "BAND_PIXELS",
    "DATA_ENV",
    "LABELS_19",
    "LABELS_43",
    "PRESETS",
    "REDUCED_SETS",
    "ImageFolder",
    "Patches",
    "Split",
    "data_root",
    "dataset_path",
    "ensure_reduced",
    "load",
    "load_bigearthnet_patches",
    "load_digits_28x28",
    "load_image_folder",
    "load_mnist_idx",
    "load_mnist_npz",
    "mnist_path",
    "read_idx",
    "read_image",
    "read_png",
    "read_pnm",
    "read_tiff",
    "resize",
    "synthetic_bigearthnet",
    "synthetic_mnist",
    "write_bigearthnet_patch",
    "write_idx",
    "write_tiff",
]

#: Named MNIST-shaped sources accepted by ``load``.
PRESETS = ("digits", "synthetic", "mnist")


def load(preset_or_path: str | Path, **kwargs: Any) -> Split:
    """An MNIST-shaped ``Split`` from a preset name or a local path; ``kwargs`` go to the loader.

    "digits" -> ``load_digits_28x28``; "synthetic" -> ``synthetic_mnist``; "mnist" -> the IDX files
    of ``mnist_path()`` (real MNIST in ``data/mnist/``, else the reduced copy); a directory holding
    the four IDX files -> ``load_mnist_idx``; a ``.npz`` file -> ``load_mnist_npz``.
    """
    if isinstance(preset_or_path, str) and preset_or_path in PRESETS:
        if preset_or_path == "digits":
            return load_digits_28x28(**kwargs)
        if preset_or_path == "mnist":
            return load_mnist_idx(mnist_path(**kwargs))
        return synthetic_mnist(**kwargs)
    path = Path(preset_or_path)
    if path.is_dir() and find_idx_files(path) is not None:
        return load_mnist_idx(path, **kwargs)
    if path.suffix == ".npz" and path.is_file():
        return load_mnist_npz(path, **kwargs)
    raise ValueError(
        f"cannot load {str(preset_or_path)!r}: expected one of {', '.join(map(repr, PRESETS))}, a directory "
        "with MNIST IDX files (train-images-idx3-ubyte[.gz], ...), or an existing mnist .npz file"
    )
