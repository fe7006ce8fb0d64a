"""BigEarthNet (Sentinel-2) patches: the real patch-folder layout, and a synthetic look-alike.

A BigEarthNet-S2 patch is a folder ``<patch>/`` holding one single-band GeoTIFF per spectral band,
``<patch>_B01.tif`` ... ``<patch>_B12.tif``, at 10 m (120 px), 20 m (60 px) or 60 m (20 px), plus
``<patch>_labels_metadata.json`` whose ``"labels"`` list names CORINE land-cover classes. The band
files are read and written with tifffile (pure Python + numpy): GDAL and rasterio would be heavy,
platform-specific installs for what are plain single-band TIFFs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .image_folder import resize

__all__ = [
    "BANDS",
    "BAND_PIXELS",
    "LABELS_19",
    "LABELS_43",
    "LABEL_43_TO_19",
    "Patches",
    "load_bigearthnet_patches",
    "read_tiff",
    "synthetic_bigearthnet",
    "write_bigearthnet_patch",
    "write_tiff",
]

#: The 12 Sentinel-2 L2A bands of BigEarthNet, in the conventional channel order (B10 is absent).
BANDS: tuple[str, ...] = ("B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B09", "B11", "B12")

#: Side in pixels of each band's file: 120 at 10 m, 60 at 20 m, 20 at 60 m resolution.
BAND_PIXELS: dict[str, int] = {
    "B01": 20, "B02": 120, "B03": 120, "B04": 120, "B05": 60, "B06": 60,
    "B07": 60, "B08": 120, "B8A": 60, "B09": 20, "B11": 60, "B12": 60,
}  # fmt: skip

#: The 43 CORINE Land Cover level-3 classes used by BigEarthNet, spelled as in its metadata files.
LABELS_43: tuple[str, ...] = (
    "Continuous urban fabric",
    "Discontinuous urban fabric",
    "Industrial or commercial units",
    "Road and rail networks and associated land",
    "Port areas",
    "Airports",
    "Mineral extraction sites",
    "Dump sites",
    "Construction sites",
    "Green urban areas",
    "Sport and leisure facilities",
    "Non-irrigated arable land",
    "Permanently irrigated land",
    "Rice fields",
    "Vineyards",
    "Fruit trees and berry plantations",
    "Olive groves",
    "Pastures",
    "Annual crops associated with permanent crops",
    "Complex cultivation patterns",
    "Land principally occupied by agriculture, with significant areas of natural vegetation",
    "Agro-forestry areas",
    "Broad-leaved forest",
    "Coniferous forest",
    "Mixed forest",
    "Natural grassland",
    "Moors and heathland",
    "Sclerophyllous vegetation",
    "Transitional woodland/shrub",
    "Beaches, dunes, sands",
    "Bare rock",
    "Sparsely vegetated areas",
    "Burnt areas",
    "Inland marshes",
    "Peatbogs",
    "Salt marshes",
    "Salines",
    "Intertidal flats",
    "Water courses",
    "Water bodies",
    "Coastal lagoons",
    "Estuaries",
    "Sea and ocean",
)

#: The 19-class BigEarthNet nomenclature (Sumbul et al. 2021).
LABELS_19: tuple[str, ...] = (
    "Urban fabric",
    "Industrial or commercial units",
    "Arable land",
    "Permanent crops",
    "Pastures",
    "Complex cultivation patterns",
    "Land principally occupied by agriculture, with significant areas of natural vegetation",
    "Agro-forestry areas",
    "Broad-leaved forest",
    "Coniferous forest",
    "Mixed forest",
    "Natural grassland and sparsely vegetated areas",
    "Moors, heathland and sclerophyllous vegetation",
    "Transitional woodland, shrub",
    "Beaches, dunes, sands",
    "Inland wetlands",
    "Coastal wetlands",
    "Inland waters",
    "Marine waters",
)

#: Index in ``LABELS_43`` -> index in ``LABELS_19``; classes absent here are dropped in the 19-class set.
LABEL_43_TO_19: dict[int, int] = {
    0: 0, 1: 0, 2: 1, 11: 2, 12: 2, 13: 2, 14: 3, 15: 3, 16: 3, 18: 3, 17: 4, 19: 5, 20: 6, 21: 7,
    22: 8, 23: 9, 24: 10, 25: 11, 31: 11, 26: 12, 27: 12, 28: 13, 29: 14, 33: 15, 34: 15, 35: 16,
    36: 16, 38: 17, 39: 17, 40: 18, 41: 18, 42: 18,
}  # fmt: skip

_MAX_LABELS = 12  # BigEarthNet patches carry 1..12 labels

# --------------------------------------------------------------------------- TIFF (tifffile)


def read_tiff(path: str | Path) -> np.ndarray:
    """Read a single-band TIFF (a BigEarthNet band file) into a 2-d array in native byte order.

    tifffile decodes it: both byte orders, strips or tiles, classic or BigTIFF, uncompressed or
    deflate/LZMA (other codecs need ``imagecodecs``). Anything it cannot read fails with the file
    name and what to do, so one bad band does not surface later as a shape error in training.
    """
    import tifffile  # on first use: it takes ~0.1 s to import, and every rank imports this package

    path = Path(path)
    compression = 1  # TIFF's code for "none", until the file says otherwise
    try:
        with tifffile.TiffFile(path) as tif:
            page = tif.pages.first
            compression, samples = page.compression, page.samplesperpixel
            image = page.asarray() if samples == 1 else None
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise  # Python's own message already names the file
    except Exception as exc:  # tifffile and its codecs raise many types for damaged data (zlib.error, ...)
        if compression == 1:
            raise ValueError(f"{path}: not a readable TIFF ({exc}); re-copy the file") from None
        first = "pip install imagecodecs" if "imagecodecs" in str(exc) else "re-copy it"
        raise ValueError(
            f"{path}: cannot decode its {getattr(compression, 'name', compression)} compression ({exc}); "
            f"{first}, or rewrite it uncompressed (gdal_translate -co COMPRESS=NONE)"
        ) from None
    if image is None or image.ndim != 2:
        raise ValueError(
            f"{path}: {samples} samples per pixel, shape {page.shape}; a BigEarthNet band file holds one "
            "2-d band (split it: gdal_translate -b N)"
        )
    return image.astype(image.dtype.newbyteorder("="), copy=False)


def write_tiff(path: str | Path, band: np.ndarray) -> Path:
    """Write one 2-d band as an uncompressed single-band TIFF, as BigEarthNet's band files are."""
    import tifffile

    band = np.asarray(band)
    if band.ndim != 2:
        raise ValueError(f"write_tiff: a band is 2-d, got shape {band.shape}")
    path = Path(path)
    tifffile.imwrite(path, band, photometric="minisblack", metadata=None)
    return path


# --------------------------------------------------------------------------- patches


@dataclass(frozen=True, eq=False)
class Patches:
    """Multi-label patches: ``images`` (n, size, size, bands) float32, ``labels`` (n, classes) multi-hot.

    ``labels`` is float32 0/1 (what a sigmoid cross-entropy wants); ``label_names[j]`` names column j.
    """

    images: np.ndarray
    labels: np.ndarray
    names: tuple[str, ...]
    label_names: tuple[str, ...]

    def __repr__(self) -> str:
        return f"Patches(images={self.images.shape}, labels={self.labels.shape}, n={len(self.names)})"


def _label_lookup(nomenclature: int) -> tuple[tuple[str, ...], dict[str, int | None]]:
    """Label name -> column for the 43- or 19-class set (``None``: dropped in the 19-class set)."""
    if nomenclature == 43:
        return LABELS_43, {name: i for i, name in enumerate(LABELS_43)}
    if nomenclature == 19:
        lookup: dict[str, int | None] = {name: LABEL_43_TO_19.get(i) for i, name in enumerate(LABELS_43)}
        lookup.update({name: i for i, name in enumerate(LABELS_19)})
        return LABELS_19, lookup
    raise ValueError(f"nomenclature must be 43 or 19, not {nomenclature!r}")


def is_patch_folder(folder: Path) -> bool:
    """Whether ``folder`` looks like a BigEarthNet-S2 patch (its label file or a band file is there)."""
    name = folder.name
    return (folder / f"{name}_labels_metadata.json").exists() or any(folder.glob(f"{name}_B*.tif"))


def _patch_dirs(root: Path) -> list[Path]:
    """Patch folders under ``root`` (or ``root`` itself when it is one), sorted by name."""
    if is_patch_folder(root):
        return [root]
    return sorted(d for d in root.iterdir() if d.is_dir() and is_patch_folder(d))


def _read_labels(path: Path, lookup: dict[str, int | None], width: int) -> np.ndarray:
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: missing label metadata; every patch folder needs <patch>_labels_metadata.json"
        )
    try:
        names = json.loads(path.read_text(encoding="utf-8"))["labels"]
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise ValueError(
            f"{path}: not BigEarthNet label metadata (need a JSON object with a 'labels' list): {exc}"
        ) from None
    if not isinstance(names, list):
        raise ValueError(f"{path}: 'labels' must be a list of CORINE class names, got {type(names).__name__}")
    row = np.zeros(width, dtype=np.float32)
    for name in names:
        if name not in lookup:
            raise ValueError(
                f"{path}: unknown label {name!r}; expected one of the 43 BigEarthNet names "
                "(workbench.datasets.bigearthnet.LABELS_43)"
            )
        column = lookup[name]
        if column is not None:
            row[column] = 1.0
    return row


def load_bigearthnet_patches(
    root: str | Path,
    *,
    size: int = 120,
    bands: Sequence[str] = BANDS,
    nomenclature: int = 43,
    scale: float = 1e-4,
    method: str = "bilinear",
    limit: int | None = None,
) -> Patches:
    """Load BigEarthNet-S2 patch folders under ``root`` (or one patch folder) into memory.

    Every band is resampled to ``size`` x ``size`` (20 and 60 px bands upsampled by ``method``) and
    multiplied by ``scale`` (1e-4 turns L2A digital numbers into reflectance). ``nomenclature``
    43 keeps the original classes; 19 maps them to the BigEarthNet-19 set, dropping the 10 classes
    it omits. ``limit`` loads only the first patches, for quick runs on a large archive.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such directory; expected BigEarthNet patch folders in it")
    unknown = [b for b in bands if b not in BANDS]
    if unknown or not bands:
        raise ValueError(
            f"unknown band(s) {unknown or '(none given)'}; BigEarthNet-S2 bands are {', '.join(BANDS)}"
        )
    label_names, lookup = _label_lookup(nomenclature)
    dirs = _patch_dirs(root)
    if limit is not None:
        dirs = dirs[: max(limit, 0)]
    if not dirs:
        raise FileNotFoundError(
            f"{root}: no BigEarthNet patch folders found; expected <patch>/<patch>_B01.tif ... and "
            "<patch>/<patch>_labels_metadata.json"
        )
    images = np.empty((len(dirs), size, size, len(bands)), dtype=np.float32)
    labels = np.empty((len(dirs), len(label_names)), dtype=np.float32)
    for i, d in enumerate(dirs):
        for c, band in enumerate(bands):
            tif = d / f"{d.name}_{band}.tif"
            if not tif.is_file():
                raise FileNotFoundError(
                    f"{tif}: missing band {band} of patch {d.name}; re-copy the patch folder"
                )
            raster = read_tiff(tif).astype(np.float32)
            images[i, :, :, c] = resize(raster, (size, size), method=method) * np.float32(scale)
        labels[i] = _read_labels(d / f"{d.name}_labels_metadata.json", lookup, len(label_names))
    return Patches(images, labels, tuple(d.name for d in dirs), label_names)


def write_bigearthnet_patch(
    root: str | Path,
    name: str,
    bands: Mapping[str, np.ndarray],
    labels: Sequence[str],
    *,
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Write one patch folder ``root/name/`` in BigEarthNet-S2's layout; returns the folder.

    ``bands`` maps band names (``BANDS``) to 2-d arrays, written as ``<name>_<band>.tif``; ``labels``
    are ``LABELS_43`` names, written with ``metadata`` to ``<name>_labels_metadata.json``. Checked
    here so that what is written always loads back with ``load_bigearthnet_patches``.
    """
    unknown_bands = [b for b in bands if b not in BANDS]
    unknown_labels = [label for label in labels if label not in LABELS_43]
    if unknown_bands or unknown_labels or not labels:
        raise ValueError(
            f"write_bigearthnet_patch {name!r}: unknown band(s) {unknown_bands}, unknown label(s) "
            f"{unknown_labels}, {len(labels)} label(s); bands are {', '.join(BANDS)}, labels LABELS_43 names"
        )
    folder = Path(root) / name
    folder.mkdir(parents=True, exist_ok=True)
    for band, array in bands.items():
        write_tiff(folder / f"{name}_{band}.tif", array)
    meta = {"labels": list(labels), **(metadata or {})}
    (folder / f"{name}_labels_metadata.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    return folder


def synthetic_bigearthnet(
    n: int, *, size: int = 120, bands: int = 12, labels: int = 43, seed: int = 0, grid: int = 4
) -> Patches:
    """BigEarthNet-shaped patches with 1..12 labels each and learnable label -> spectrum structure.

    Every label has a fixed reflectance signature across ``bands``; a patch is a ``grid`` x ``grid``
    mosaic of its labels' signatures (each label covers at least one cell when it fits), upsampled
    to ``size`` and overlaid with noise. Values are reflectance-like, roughly 0..0.6 (float32).
    """
    if n < 0 or size < 1 or bands < 1 or labels < 1:
        raise ValueError(
            f"synthetic_bigearthnet: bad shape n={n}, size={size}, bands={bands}, labels={labels}"
        )
    rng = np.random.default_rng(seed)
    signatures = rng.uniform(0.02, 0.5, size=(labels, bands)).astype(np.float32)
    cells_per_side = max(1, min(grid, size))
    n_cells = cells_per_side * cells_per_side
    max_k = min(_MAX_LABELS, labels)
    multi_hot = np.zeros((n, labels), dtype=np.float32)
    cells = np.empty((n, n_cells), dtype=np.intp)
    for i in range(n):
        k = int(rng.integers(1, max_k + 1))
        active = rng.choice(labels, size=k, replace=False)
        multi_hot[i, active] = 1.0
        fill = rng.choice(active, size=max(n_cells - k, 0))
        cells[i] = rng.permutation(np.concatenate([active, fill]))[:n_cells]
    mosaic = signatures[cells.reshape(n, cells_per_side, cells_per_side)]  # (n, g, g, bands)
    images = resize(mosaic, (size, size), method="nearest", axes=(1, 2))
    images += np.float32(0.02) * rng.standard_normal(size=images.shape, dtype=np.float32)
    np.clip(images, 0.0, None, out=images)
    if labels == 43:
        names = LABELS_43
    elif labels == 19:
        names = LABELS_19
    else:
        names = tuple(f"label_{j}" for j in range(labels))
    return Patches(images, multi_hot, tuple(f"synthetic_{i:06d}" for i in range(n)), names)
