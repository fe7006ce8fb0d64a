"""Class-per-subfolder image sets, read with numpy and zlib only.

The S-GAN case study trains on a folder of small images. Pillow is not a dependency of the
project (and the datasets layer must import fast and in any environment), so this module carries
its own readers for the formats such folders use: 8/16-bit non-interlaced PNG and binary PPM/PGM.
It also holds the numpy resampling used by every loader in the package.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["ImageFolder", "load_image_folder", "read_image", "read_png", "read_pnm", "resize"]

#: File suffixes ``load_image_folder`` picks up (case-insensitive).
IMAGE_SUFFIXES = (".png", ".ppm", ".pgm", ".pnm")

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # colour type -> samples per pixel
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


# --------------------------------------------------------------------------- PNG


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def _unfilter(raw: bytes, height: int, stride: int, bpp: int, path: Path) -> np.ndarray:
    """Undo the per-scanline PNG filters 0-4; returns ``(height, stride)`` uint8."""
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.int64)
    for r in range(height):
        start = r * (stride + 1)
        ftype = raw[start]
        line = np.frombuffer(raw, dtype=np.uint8, count=stride, offset=start + 1).astype(np.int64)
        if ftype == 0:
            cur = line
        elif ftype == 1:  # Sub: running sum per byte lane
            cur = np.cumsum(line.reshape(-1, bpp), axis=0).reshape(-1) % 256
        elif ftype == 2:  # Up
            cur = (line + prev) % 256
        elif ftype in (3, 4):  # Average / Paeth depend on the reconstructed left byte: sequential
            vals, up = line.tolist(), prev.tolist()
            rec = [0] * stride
            for i in range(stride):
                left = rec[i - bpp] if i >= bpp else 0
                if ftype == 3:
                    rec[i] = (vals[i] + ((left + up[i]) >> 1)) & 0xFF
                else:
                    upleft = up[i - bpp] if i >= bpp else 0
                    rec[i] = (vals[i] + _paeth(left, up[i], upleft)) & 0xFF
            cur = np.array(rec, dtype=np.int64)
        else:
            raise ValueError(f"{path}: corrupt PNG, unknown filter type {ftype} on row {r}")
        out[r] = cur
        prev = cur
    return out


def read_png(path: str | Path) -> np.ndarray:
    """Read a non-interlaced 8/16-bit PNG into ``(h, w, c)`` uint8/uint16 (c = 1, 2, 3 or 4).

    Palette images (8-bit) are expanded to RGB. Chunk CRCs are checked so that a truncated or
    damaged file fails here, with its name, rather than producing a silently wrong image.
    """
    path = Path(path)
    data = path.read_bytes()
    if data[:8] != _PNG_SIGNATURE:
        raise ValueError(f"{path}: not a PNG file (bad signature {data[:8]!r})")
    pos, header, palette, idat = 8, None, None, []
    while True:
        if pos + 8 > len(data):
            raise ValueError(f"{path}: truncated PNG (no IEND chunk); re-copy or re-save the file")
        length, ctype = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        crc_bytes = data[pos + 8 + length : pos + 12 + length]
        if len(body) != length or len(crc_bytes) != 4:
            raise ValueError(f"{path}: truncated PNG in chunk {ctype!r}; re-copy or re-save the file")
        if zlib.crc32(ctype + body) != struct.unpack(">I", crc_bytes)[0]:
            raise ValueError(f"{path}: corrupt PNG, CRC mismatch in chunk {ctype!r}")
        pos += 12 + length
        if ctype == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif ctype == b"PLTE":
            palette = np.frombuffer(body, dtype=np.uint8).reshape(-1, 3)
        elif ctype == b"IDAT":
            idat.append(body)
        elif ctype == b"IEND":
            break
    if header is None:
        raise ValueError(f"{path}: corrupt PNG, missing IHDR chunk")
    width, height, depth, colour, _compression, _filter, interlace = header
    if colour not in _PNG_CHANNELS or depth not in (8, 16) or (colour == 3 and depth != 8):
        raise ValueError(
            f"{path}: unsupported PNG (bit depth {depth}, colour type {colour}); re-save as 8-bit gray/RGB(A)"
        )
    if interlace:
        raise ValueError(f"{path}: interlaced PNG not supported; re-save it without interlacing")
    channels = _PNG_CHANNELS[colour]
    bpp = channels * depth // 8
    stride = width * bpp
    try:
        raw = zlib.decompress(b"".join(idat))
    except zlib.error as exc:
        raise ValueError(f"{path}: corrupt PNG image data ({exc})") from None
    if len(raw) < height * (stride + 1):
        raise ValueError(f"{path}: truncated PNG image data ({len(raw)} of {height * (stride + 1)} bytes)")
    rows = _unfilter(raw, height, stride, bpp, path)
    if depth == 16:
        image = rows.view(">u2").astype(np.uint16).reshape(height, width, channels)
    else:
        image = rows.reshape(height, width, channels)
    if colour == 3:
        if palette is None:
            raise ValueError(f"{path}: corrupt PNG, palette image without PLTE chunk")
        if image.max(initial=0) >= len(palette):
            raise ValueError(f"{path}: corrupt PNG, palette index out of range")
        image = palette[image[..., 0]]
    return image


# --------------------------------------------------------------------------- PPM / PGM


def read_pnm(path: str | Path) -> tuple[np.ndarray, int]:
    """Read a binary PGM (P5) or PPM (P6) into ``((h, w, c) uint8/uint16, maxval)``."""
    path = Path(path)
    data = path.read_bytes()
    magic = data[:2]
    if magic not in (b"P5", b"P6"):
        raise ValueError(f"{path}: not a binary PGM/PPM (magic {magic!r}); only P5 and P6 are read")
    tokens: list[int] = []
    pos = 2
    while len(tokens) < 3:
        while pos < len(data) and data[pos : pos + 1].isspace():
            pos += 1
        if pos < len(data) and data[pos : pos + 1] == b"#":
            while pos < len(data) and data[pos : pos + 1] not in (b"\n", b"\r"):
                pos += 1
            continue
        start = pos
        while pos < len(data) and data[pos : pos + 1].isdigit():
            pos += 1
        if start == pos:
            raise ValueError(f"{path}: truncated or corrupt PGM/PPM header")
        tokens.append(int(data[start:pos]))
    pos += 1  # the single whitespace byte after maxval
    width, height, maxval = tokens
    if not 0 < maxval < 65536:
        raise ValueError(f"{path}: bad PGM/PPM maxval {maxval}")
    channels = 1 if magic == b"P5" else 3
    dtype = np.dtype(np.uint8) if maxval < 256 else np.dtype(">u2")
    count = width * height * channels
    if len(data) - pos < count * dtype.itemsize:
        raise ValueError(
            f"{path}: truncated PGM/PPM, {len(data) - pos} data bytes for {width}x{height}x{channels}"
        )
    image = np.frombuffer(data, dtype=dtype, count=count, offset=pos).reshape(height, width, channels)
    return image.astype(np.uint8 if maxval < 256 else np.uint16), maxval


# --------------------------------------------------------------------------- folders


def read_image(path: str | Path) -> np.ndarray:
    """Read a PNG/PPM/PGM as float32 ``(h, w, c)`` in [0, 1], alpha dropped (c = 1 or 3)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".png":
        raw = read_png(path)
        scale = 65535.0 if raw.dtype == np.uint16 else 255.0
    elif suffix in (".ppm", ".pgm", ".pnm"):
        raw, scale = read_pnm(path)
    else:
        raise ValueError(f"{path}: unsupported image type {suffix!r}; use one of {', '.join(IMAGE_SUFFIXES)}")
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
    """Load ``root/<class>/**/*.{png,ppm,pgm}``; classes are the sorted subfolder names.

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
