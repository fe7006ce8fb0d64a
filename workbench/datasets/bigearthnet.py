"""BigEarthNet (Sentinel-2) patches: the real patch-folder layout, and a synthetic look-alike.

A BigEarthNet-S2 patch is a folder ``<patch>/`` holding one single-band GeoTIFF per spectral band,
``<patch>_B01.tif`` ... ``<patch>_B12.tif``, at 10 m (120 px), 20 m (60 px) or 60 m (20 px), plus
``<patch>_labels_metadata.json`` whose ``"labels"`` list names CORINE land-cover classes. GDAL and
rasterio are heavy, platform-specific installs, and BigEarthNet's files are plain uncompressed
strip TIFFs, so a ~60-line reader suffices and keeps this layer numpy-only.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .image_folder import resize

__all__ = [
    "BANDS",
    "LABELS_19",
    "LABELS_43",
    "LABEL_43_TO_19",
    "Patches",
    "load_bigearthnet_patches",
    "read_tiff",
    "synthetic_bigearthnet",
]

#: The 12 Sentinel-2 L2A bands of BigEarthNet, in the conventional channel order (B10 is absent).
BANDS: tuple[str, ...] = ("B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B09", "B11", "B12")

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

# --------------------------------------------------------------------------- TIFF

_TIFF_TYPE_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8, 16: 8}
_TIFF_INT_FORMATS = {1: "B", 3: "H", 4: "I", 6: "b", 8: "h", 9: "i", 16: "Q"}
_TIFF_DTYPES = {
    (1, 8): "u1", (1, 16): "u2", (1, 32): "u4",
    (2, 8): "i1", (2, 16): "i2", (2, 32): "i4",
    (3, 32): "f4", (3, 64): "f8",
}  # fmt: skip
_WIDTH, _LENGTH, _BITS, _COMPRESSION, _STRIP_OFFSETS = 256, 257, 258, 259, 273
_SAMPLES, _STRIP_BYTES, _TILE_WIDTH, _SAMPLE_FORMAT = 277, 279, 322, 339


def _tiff_tags(data: bytes, path: Path) -> tuple[str, dict[int, tuple[int, ...]]]:
    """Byte order and the integer-valued tags of the first IFD."""
    if len(data) < 8 or data[:2] not in (b"II", b"MM"):
        raise ValueError(f"{path}: not a TIFF file (header {data[:4]!r})")
    order = "<" if data[:2] == b"II" else ">"
    (magic,) = struct.unpack(order + "H", data[2:4])
    if magic == 43:
        raise ValueError(
            f"{path}: BigTIFF is not supported; rewrite as classic TIFF (gdal_translate -co BIGTIFF=NO)"
        )
    if magic != 42:
        raise ValueError(f"{path}: bad TIFF magic number {magic}, expected 42")
    (ifd,) = struct.unpack(order + "I", data[4:8])
    if ifd + 2 > len(data):
        raise ValueError(
            f"{path}: truncated TIFF (IFD offset {ifd} beyond {len(data)} bytes); re-copy the file"
        )
    (count,) = struct.unpack(order + "H", data[ifd : ifd + 2])
    if ifd + 2 + 12 * count > len(data):
        raise ValueError(f"{path}: truncated TIFF directory; re-copy the file")
    tags: dict[int, tuple[int, ...]] = {}
    for i in range(count):
        entry = ifd + 2 + 12 * i
        tag, typ, n = struct.unpack(order + "HHI", data[entry : entry + 8])
        if typ not in _TIFF_INT_FORMATS:
            continue  # ASCII/rational/float tags (GeoTIFF keys, descriptions) are not needed
        nbytes = _TIFF_TYPE_SIZES[typ] * n
        if nbytes <= 4:
            start = entry + 8
        else:
            (start,) = struct.unpack(order + "I", data[entry + 8 : entry + 12])
        if start + nbytes > len(data):
            raise ValueError(f"{path}: truncated TIFF, tag {tag} points past the end of the file; re-copy it")
        tags[tag] = struct.unpack(f"{order}{n}{_TIFF_INT_FORMATS[typ]}", data[start : start + nbytes])
    return order, tags


def read_tiff(path: str | Path) -> np.ndarray:
    """Read an uncompressed, single-band, strip-organised TIFF into a 2-d array (native byte order).

    Handles both byte orders and uint8/16/32, int8/16/32, float32/64 samples: what GDAL writes for
    BigEarthNet bands. Anything else fails with the file name and the unsupported feature.
    """
    path = Path(path)
    data = path.read_bytes()
    order, tags = _tiff_tags(data, path)
    first = {tag: values[0] for tag, values in tags.items() if values}
    if _WIDTH not in first or _LENGTH not in first:
        raise ValueError(f"{path}: TIFF without image width/length tags")
    width, height = first[_WIDTH], first[_LENGTH]
    if first.get(_COMPRESSION, 1) != 1:
        raise ValueError(
            f"{path}: compressed TIFF (compression={first[_COMPRESSION]}) not supported; "
            "rewrite uncompressed (gdal_translate -co COMPRESS=NONE)"
        )
    if first.get(_SAMPLES, 1) != 1:
        raise ValueError(f"{path}: {first[_SAMPLES]} samples per pixel; only single-band TIFFs are read")
    if _TILE_WIDTH in tags:
        raise ValueError(
            f"{path}: tiled TIFF not supported; rewrite with strips (gdal_translate -co TILED=NO)"
        )
    bits, fmt = first.get(_BITS, 1), first.get(_SAMPLE_FORMAT, 1)
    if (fmt, bits) not in _TIFF_DTYPES:
        raise ValueError(f"{path}: unsupported TIFF sample type (format {fmt}, {bits} bits)")
    dtype = np.dtype(order + _TIFF_DTYPES[(fmt, bits)])
    offsets = tags.get(_STRIP_OFFSETS)
    if not offsets:
        raise ValueError(f"{path}: TIFF without strip offsets")
    needed = width * height * dtype.itemsize
    counts = tags.get(_STRIP_BYTES) or ((needed,) if len(offsets) == 1 else ())
    if len(counts) != len(offsets):
        raise ValueError(f"{path}: TIFF strip offsets and byte counts disagree")
    strips = [data[o : o + c] for o, c in zip(offsets, counts)]
    raw = b"".join(strips)
    if any(len(s) != c for s, c in zip(strips, counts)) or len(raw) < needed:
        raise ValueError(
            f"{path}: truncated TIFF, {len(raw)} of {needed} pixel bytes present; re-copy the file"
        )
    image = np.frombuffer(raw, dtype=dtype, count=width * height).reshape(height, width)
    return image.astype(dtype.newbyteorder("="))


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


def _patch_dirs(root: Path) -> list[Path]:
    """Patch folders under ``root`` (or ``root`` itself when it is one), sorted by name."""

    def is_patch(d: Path) -> bool:
        return (d / f"{d.name}_labels_metadata.json").exists() or any(d.glob(f"{d.name}_B*.tif"))

    if is_patch(root):
        return [root]
    return sorted(d for d in root.iterdir() if d.is_dir() and is_patch(d))


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
