"""Real MNIST from local files: the IDX originals (optionally gzipped) or keras' ``mnist.npz``.

Nothing here downloads. The case studies run on machines without network access, so the files
have to be copied in by hand; the loaders therefore check the files carefully and say in one line
which file is wrong and what to do, instead of failing later inside a training step.
"""

from __future__ import annotations

import gzip
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["IDX_NAMES", "Split", "find_idx_files", "load_mnist_idx", "load_mnist_npz", "read_idx", "write_idx"]

#: The four IDX files of the MNIST distribution, by role.
IDX_NAMES: dict[str, str] = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}

_IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

_GET_MNIST = (
    "copy the four MNIST files (train-images-idx3-ubyte, train-labels-idx1-ubyte, "
    "t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, optionally .gz) into it"
)


@dataclass(frozen=True, eq=False)
class Split:
    """A train/test split of an image-classification set.

    Images are float32 in [0, 1], shape ``(n, h, w)`` (or ``(n, h, w, c)``); labels are int64 class
    indices. Frozen so a loaded set can be shared between workloads without one mutating the
    other's view of it (the arrays themselves are still writable numpy arrays).
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    def __post_init__(self) -> None:
        for x, y, name in ((self.x_train, self.y_train, "train"), (self.x_test, self.y_test, "test")):
            if len(x) != len(y):
                raise ValueError(f"Split: {name} has {len(x)} images but {len(y)} labels")

    @property
    def num_classes(self) -> int:
        """Number of classes, taken as ``max label + 1`` over both halves."""
        top = [int(y.max()) for y in (self.y_train, self.y_test) if len(y)]
        return max(top) + 1 if top else 0

    def __repr__(self) -> str:
        return (
            f"Split(x_train={self.x_train.shape} {self.x_train.dtype}, y_train={self.y_train.shape}, "
            f"x_test={self.x_test.shape} {self.x_test.dtype}, y_test={self.y_test.shape})"
        )


def _read_bytes(path: Path) -> bytes:
    """Read a file, transparently un-gzipping ``.gz`` files; corrupt gzip -> ValueError."""
    if path.suffix == ".gz":
        try:
            with gzip.open(path, "rb") as fh:
                return fh.read()
        except (OSError, EOFError, zlib.error) as exc:
            raise ValueError(f"{path}: not a readable gzip file ({exc}); re-copy or gunzip it") from exc
    return path.read_bytes()


def read_idx(path: str | Path) -> np.ndarray:
    """Parse one IDX file (the format MNIST ships in): magic ``00 00 <dtype> <ndim>``, big-endian dims."""
    path = Path(path)
    data = _read_bytes(path)
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES or not 1 <= data[3] <= 4:
        raise ValueError(
            f"{path}: bad IDX magic number {data[:4].hex() or '(empty file)'}; "
            "expected 0000080n - is this really an MNIST IDX file?"
        )
    dtype, ndim = _IDX_DTYPES[data[2]], data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{path}: truncated IDX header ({len(data)} bytes); re-copy the file")
    dims = struct.unpack(f">{ndim}I", data[4:header])
    expected = header + int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(data) != expected:
        what = "truncated" if len(data) < expected else "has trailing bytes"
        raise ValueError(
            f"{path}: {what}: header says {dims} ({expected} bytes) but file has {len(data)} bytes; "
            "re-copy the file"
        )
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(dims)


def write_idx(path: str | Path, array: np.ndarray) -> Path:
    """Write ``array`` as one IDX file, as MNIST ships them after gunzip: the inverse of ``read_idx``.

    Used to lay out data in MNIST's own on-disk format, so that input pipelines reading raw IDX
    records (16-byte header, then 784 bytes per image) can be profiled on it.
    """
    array = np.asarray(array)
    codes = {dtype.newbyteorder("="): code for code, dtype in _IDX_DTYPES.items()}
    code = codes.get(array.dtype.newbyteorder("="))
    if code is None or not 1 <= array.ndim <= 4:
        raise ValueError(f"write_idx: cannot store {array.dtype} with {array.ndim} dims in IDX")
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    path = Path(path)
    path.write_bytes(header + array.astype(_IDX_DTYPES[code], copy=False).tobytes())
    return path


def find_idx_files(directory: str | Path) -> dict[str, Path] | None:
    """Locate the four IDX files in ``directory``; ``None`` when any is missing.

    Accepts the original names, the ``train-images.idx3-ubyte`` spelling some mirrors use, and
    ``.gz`` variants of both.
    """
    directory = Path(directory)
    found: dict[str, Path] = {}
    for role, name in IDX_NAMES.items():
        dotted = name.replace("-idx", ".idx")
        for candidate in (name, name + ".gz", dotted, dotted + ".gz"):
            if (directory / candidate).is_file():
                found[role] = directory / candidate
                break
        else:
            return None
    return found


def _check_pair(x: np.ndarray, y: np.ndarray, x_src: str, y_src: str) -> tuple[np.ndarray, np.ndarray]:
    """Validate one images/labels pair and convert to float32 [0, 1] / int64."""
    if x.ndim != 3 or x.shape[1:] != (28, 28):
        raise ValueError(f"{x_src}: images have shape {x.shape}, expected (n, 28, 28) as in MNIST")
    if y.ndim != 1:
        raise ValueError(f"{y_src}: labels have shape {y.shape}, expected (n,)")
    if len(x) != len(y):
        raise ValueError(f"{x_src} has {len(x)} images but {y_src} has {len(y)} labels; files do not match")
    if len(y) and (y.min() < 0 or y.max() > 9):
        raise ValueError(f"{y_src}: labels outside 0..9 (min {y.min()}, max {y.max()})")
    if np.issubdtype(x.dtype, np.integer):
        images = x.astype(np.float32) / np.float32(255.0)
    else:
        images = x.astype(np.float32)
        if images.size and images.max() > 1.0:
            images /= np.float32(255.0)
    return np.ascontiguousarray(images), y.astype(np.int64)


def load_mnist_idx(directory: str | Path) -> Split:
    """Load MNIST from the four original IDX files (plain or ``.gz``) in ``directory``."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no such directory; create it and {_GET_MNIST}")
    files = find_idx_files(directory)
    if files is None:
        missing = [n for n in IDX_NAMES.values() if not any(directory.glob(n.split("-idx")[0] + "*"))]
        raise FileNotFoundError(
            f"{directory}: missing MNIST file(s) {', '.join(missing) or '?'}; {_GET_MNIST}"
        )
    arrays = {role: read_idx(path) for role, path in files.items()}
    for role in ("x_train", "x_test"):
        if arrays[role].dtype != np.uint8 or arrays[role].ndim != 3:
            raise ValueError(f"{files[role]}: expected a 3-d unsigned-byte image file (magic 00000803)")
    for role in ("y_train", "y_test"):
        if arrays[role].dtype != np.uint8 or arrays[role].ndim != 1:
            raise ValueError(f"{files[role]}: expected a 1-d unsigned-byte label file (magic 00000801)")
    x_train, y_train = _check_pair(
        arrays["x_train"], arrays["y_train"], str(files["x_train"]), str(files["y_train"])
    )
    x_test, y_test = _check_pair(
        arrays["x_test"], arrays["y_test"], str(files["x_test"]), str(files["y_test"])
    )
    return Split(x_train, y_train, x_test, y_test)


def load_mnist_npz(path: str | Path) -> Split:
    """Load MNIST from keras' ``mnist.npz`` (arrays ``x_train, y_train, x_test, y_test``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no such file; copy keras' mnist.npz there (~/.keras/datasets/mnist.npz on a machine "
            "that has it)"
        )
    keys = ("x_train", "y_train", "x_test", "y_test")
    try:
        npz = np.load(path, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ValueError("a single .npy array, not an .npz archive")
        with npz:
            missing = [k for k in keys if k not in npz.files]
            if missing:
                raise KeyError(", ".join(missing))
            arrays = {k: npz[k] for k in keys}
    except KeyError as exc:
        raise ValueError(
            f"{path}: missing array(s) {exc.args[0]}; expected keras' mnist.npz layout {', '.join(keys)}"
        ) from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise ValueError(f"{path}: not a readable .npz archive ({exc}); re-copy keras' mnist.npz") from None
    x_train, y_train = _check_pair(
        arrays["x_train"], arrays["y_train"], f"{path}[x_train]", f"{path}[y_train]"
    )
    x_test, y_test = _check_pair(arrays["x_test"], arrays["y_test"], f"{path}[x_test]", f"{path}[y_test]")
    return Split(x_train, y_train, x_test, y_test)
