"""Class-per-subfolder image sets (PNG, JPEG, PPM/PGM), decoded by Pillow.

The S-GAN and InceptionV3 case studies train on folders of images. Decoding is Pillow's job (a
well-kept library that knows every variant of these formats); this module adds what a dataset
needs around it: one-line errors that name the bad file and say what to do, labels from folder
names, and the numpy resampling used by every loader in the package. Pillow is imported on first
use so that ``import workbench.datasets`` stays fast on every rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from PIL import Image as PILImage

__all__ = ["ImageFolder", "load_image_folder", "read_image", "read_png", "read_pnm", "resize"]

#: File suffixes ``load_image_folder`` picks up (case-insensitive); the content picks the decoder.
IMAGE_SUFFIXES: tuple[str, ...] = (".png", ".jpg", ".jpeg", ".ppm", ".pgm", ".pnm")
#: Pillow's format names -> how messages call them.
_FORMAT_NAMES = {"PNG": "PNG", "JPEG": "JPEG", "PPM": "PGM/PPM"}
_ARRAY_MODES = ("L", "LA", "RGB", "RGBA")  # modes numpy takes as they are: (h, w[, c]) uint8
_LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)


# --------------------------------------------------------------------------- resampling


def _source_coords(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Half-pixel-centre source coordinates (as TF/OpenCV ``align_corners=False``)."""
    src = (np.arange(n_out, dtype=np.float64) + 0.5) * (n_in / n_out) - 0.5
    src = np.clip(src, 0.0, n_in - 1)
    lo = np.floor(src).astype(np.intp)
    hi = np.minimum(lo + 1, n_in - 1)
    return lo, hi, (src - lo).astype(np.float32)


def resize(
    array: np.ndarray,
    size: tuple[int, int],
    *,
    method: str = "bilinear",
    axes: tuple[int, int] = (-2, -1),
) -> np.ndarray:
    """Resample the two spatial ``axes`` of ``array`` to ``size`` = (height, width); float32 out.

    Pure numpy so that 8x8 digits, 20/60-pixel Sentinel-2 bands and odd-sized folder images can be
    brought to a common size without scipy/Pillow/TensorFlow. ``method`` is "bilinear" or "nearest".
    """
    if method not in ("bilinear", "nearest"):
        raise ValueError(f"resize: method must be 'bilinear' or 'nearest', not {method!r}")
    out_h, out_w = (int(s) for s in size)
    if out_h < 1 or out_w < 1:
        raise ValueError(f"resize: size must be positive, got {size}")
    a = np.moveaxis(np.asarray(array, dtype=np.float32), axes, (-2, -1))
    in_h, in_w = a.shape[-2:]
    if (in_h, in_w) != (out_h, out_w):
        if method == "nearest":
            rows = np.minimum(((np.arange(out_h) + 0.5) * in_h / out_h).astype(np.intp), in_h - 1)
            cols = np.minimum(((np.arange(out_w) + 0.5) * in_w / out_w).astype(np.intp), in_w - 1)
            a = a[..., rows, :][..., cols]
        else:
            lo, hi, wt = _source_coords(in_h, out_h)
            a = a[..., lo, :] * (1 - wt)[:, None] + a[..., hi, :] * wt[:, None]
            lo, hi, wt = _source_coords(in_w, out_w)
            a = a[..., lo] * (1 - wt) + a[..., hi] * wt
    return np.ascontiguousarray(np.moveaxis(a, (-2, -1), axes), dtype=np.float32)


# --------------------------------------------------------------------------- decoding (Pillow)


def _as_array(image: PILImage.Image) -> tuple[np.ndarray, int]:
    """Pixels as ``(h, w, c)`` uint8 or uint16 (c = 1..4) and the value that means full intensity."""
    if image.mode.startswith("I"):  # 16-bit gray PNG ("I;16"), 16-bit PGM ("I", scaled to 65535)
        return np.clip(np.asarray(image), 0, 65535).astype(np.uint16)[..., None], 65535
    if image.mode not in _ARRAY_MODES:  # palette, bilevel, CMYK/YCbCr JPEG, ...
        target = "L" if image.mode == "1" else "RGBA" if image.has_transparency_data else "RGB"
        image = image.convert(target)
    array = np.asarray(image)
    return (array[..., None] if array.ndim == 2 else array), 255


def _decode(path: Path, expected: str | None) -> tuple[np.ndarray, int]:
    """Decode ``path`` with Pillow; ``expected`` is the Pillow format it must hold (None: any we read).

    PNG files are verified first (chunk CRCs) because Pillow does not check IDAT checksums while
    decoding: a damaged file then fails here, with its name, instead of giving wrong pixels.
    """
    from PIL import Image, UnidentifiedImageError

    accepted = (expected,) if expected else tuple(_FORMAT_NAMES)
    found: str | None = None
    try:
        with Image.open(path) as image:
            found = image.format
            if found == "PNG" and found in accepted:
                image.verify()
        if found in accepted:
            with Image.open(path) as image:
                image.load()
                return _as_array(image)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise  # Python's own message already names the file
    except UnidentifiedImageError:
        found = None
    except Exception as exc:  # Pillow raises many types for damaged data (SyntaxError, zlib.error, ...)
        kind = _FORMAT_NAMES.get(found or "", "image")
        raise ValueError(f"{path}: corrupt or truncated {kind} file ({exc}); re-copy it or re-save it") from None
    names = [_FORMAT_NAMES[f] for f in accepted]
    wanted = " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    holds = f"it holds {found}" if found else "Pillow cannot identify it: another format, or damaged"
    raise ValueError(f"{path}: not a {wanted} file ({holds}); re-save it as {_FORMAT_NAMES[accepted[0]]}")


def read_png(path: str | Path) -> np.ndarray:
    """Read a PNG into ``(h, w, c)`` uint8 (c = 1, 2, 3 or 4), or uint16 for 16-bit gray.

    Palette images come back as RGB (RGBA with transparency); 16-bit colour PNGs as 8-bit RGB(A),
    as Pillow reads them.
    """
    return _decode(Path(path), "PNG")[0]


def read_pnm(path: str | Path) -> tuple[np.ndarray, int]:
    """Read a PGM/PPM into ``((h, w, c) uint8/uint16, full-scale value)``, c = 1 or 3.

    The full-scale value is 255 or 65535: Pillow rescales other maxvals to one of those, and reads
    16-bit PPMs as 8-bit RGB.
    """
    return _decode(Path(path), "PPM")


# --------------------------------------------------------------------------- folders


def read_image(path: str | Path) -> np.ndarray:
    """Read a PNG/JPEG/PGM/PPM as float32 ``(h, w, c)`` in [0, 1], alpha dropped (c = 1 or 3).

    The content decides the decoder, not the suffix: image sets often hold a PNG named ``.jpg``.
    """
    path = Path(path)
    if path.suffix.lower() not in IMAGE_SUFFIXES:
        raise ValueError(
            f"{path}: unsupported image type {path.suffix!r}; use one of {', '.join(IMAGE_SUFFIXES)}"
        )
    raw, scale = _decode(path, None)
    image = raw.astype(np.float32) / np.float32(scale)
    if image.shape[-1] in (2, 4):  # drop alpha
        image = image[..., :-1]
    return image


def _to_channels(image: np.ndarray, channels: int) -> np.ndarray:
    if image.shape[-1] == channels:
        return image
    if channels == 1:
        return (image @ _LUMA)[..., None]
    return np.repeat(image, 3, axis=-1)


@dataclass(frozen=True, eq=False)
class ImageFolder:
    """Images ``(n, h, w, c)`` float32 in [0, 1], int64 ``labels`` indexing ``class_names``."""

    images: np.ndarray
    labels: np.ndarray
    class_names: tuple[str, ...]
    paths: tuple[Path, ...]

    def __repr__(self) -> str:
        return f"ImageFolder(images={self.images.shape}, classes={list(self.class_names)})"


def load_image_folder(
    root: str | Path,
    *,
    size: int | tuple[int, int] | None = None,
    channels: int | None = None,
    method: str = "bilinear",
) -> ImageFolder:
    """Load ``root/<class>/**/*.{png,jpg,jpeg,ppm,pgm,pnm}``; classes are the sorted subfolder names.

    ``size`` = (height, width) resamples every image (needed when sizes differ). ``channels`` is 1
    or 3; by default 1 when every image is grayscale, else 3. Hidden folders (``.ipynb_checkpoints``)
    are skipped, as are files with other suffixes.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such directory; expected one subfolder of images per class")
    if channels not in (None, 1, 3):
        raise ValueError(f"load_image_folder: channels must be 1, 3 or None, not {channels!r}")
    class_dirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    paths: list[Path] = []
    labels: list[int] = []
    for index, class_dir in enumerate(class_dirs):
        for file in sorted(class_dir.rglob("*")):
            hidden = any(part.startswith(".") for part in file.relative_to(class_dir).parts)
            if file.is_file() and file.suffix.lower() in IMAGE_SUFFIXES and not hidden:
                paths.append(file)
                labels.append(index)
    if not paths:
        raise FileNotFoundError(
            f"{root}: no images found; expected {root}/<class name>/<image>{{{','.join(IMAGE_SUFFIXES)}}}"
        )
    images = [read_image(p) for p in paths]
    if channels is None:
        channels = 1 if all(im.shape[-1] == 1 for im in images) else 3
    if size is None:
        shapes = {im.shape[:2] for im in images}
        if len(shapes) > 1:
            raise ValueError(
                f"{root}: images have different sizes {sorted(shapes)[:4]}; pass size=(height, width)"
            )
    else:
        images = [resize(im, _as_size(size), method=method, axes=(0, 1)) for im in images]
    stacked = np.stack([_to_channels(im, channels) for im in images]).astype(np.float32)
    return ImageFolder(
        images=np.clip(stacked, 0.0, 1.0),
        labels=np.asarray(labels, dtype=np.int64),
        class_names=tuple(d.name for d in class_dirs),
        paths=tuple(paths),
    )


def _as_size(size: int | Sequence[int]) -> tuple[int, int]:
    """Accept ``28`` or ``(28, 28)`` for a size."""
    if isinstance(size, int):
        return size, size
    h, w = size
    return int(h), int(w)
