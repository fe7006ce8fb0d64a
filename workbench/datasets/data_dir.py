"""Where the case studies' files live: ``data/``, with real sets copied in or reduced sets made here.

Cluster nodes have no network, so nothing is downloaded: a real dataset is one the user copies into
``data/<name>/`` (``data/README.md`` says which files go where). Without it, a *reduced* set is
generated on first use under ``data/reduced/<name>/`` in the real set's own on-disk format (IDX
files, BigEarthNet patch folders of GeoTIFF bands, class folders of PNG/JPEG), so the input
pipelines being profiled open, decode and batch files exactly as they would on the real data.

Generation is seeded (the same bytes every time, on every machine with the same library
versions), and atomic: files are written into a temporary folder that is renamed into place only
when complete, under a lock so that MPI ranks starting together make one copy, not one each.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from .bigearthnet import BAND_PIXELS, BANDS, is_patch_folder, synthetic_bigearthnet, write_bigearthnet_patch
from .digits import load_digits_28x28
from .image_folder import IMAGE_SUFFIXES
from .mnist import IDX_NAMES, find_idx_files, write_idx

__all__ = ["DATA_ENV", "REDUCED_SETS", "data_root", "dataset_path", "ensure_reduced", "mnist_path"]

#: Environment variable naming the data directory (wins over the checkout's ``data/``).
DATA_ENV = "WORKBENCH_DATA"
#: The sets ``ensure_reduced`` can make; each is also the folder name of the real set in ``data/``.
REDUCED_SETS: tuple[str, ...] = ("mnist", "mnist_jittered", "bigearthnet", "image_folder")
#: Copies per digit in ``mnist_jittered``: enough distinct batches of 256 that "fresh" data means something.
_JITTERED_REPEAT = 8

_SEED = 0
_VERSION = 1  # bump when a generator changes: copies made by an older version are then rebuilt
_MANIFEST = ".manifest.json"  # written last into the temporary folder: its presence means complete
_BIGEARTHNET_PATCHES = 8
_BIGEARTHNET_SCALE = 1e-4  # L2A digital number -> reflectance, as load_bigearthnet_patches assumes
_IMAGES_PER_CLASS = 12  # photo crops per class in the reduced image folder
_IMAGE_SIDE = 160


# --------------------------------------------------------------------------- where


def _is_checkout(directory: Path) -> bool:
    pyproject = directory / "pyproject.toml"
    return pyproject.is_file() and 'name = "workbench"' in pyproject.read_text(encoding="utf-8")


def data_root() -> Path:
    """The data directory: ``$WORKBENCH_DATA``, else the checkout's ``data/``, else ``./data``.

    The checkout's ``data/`` (next to the ``workbench`` package) is used when running from a
    clone or an editable install, so notebooks and ``mpiexec`` ranks started from any folder find
    the same files; an installed package falls back to ``data/`` in the working directory.
    """
    env = os.environ.get(DATA_ENV, "").strip()
    if env:
        return Path(env).expanduser().absolute()
    checkout = Path(__file__).resolve().parents[2]
    if _is_checkout(checkout):
        return checkout / "data"
    return Path.cwd() / "data"


def _base(root: str | Path | None) -> Path:
    return Path(root).expanduser().absolute() if root is not None else data_root()


# --------------------------------------------------------------------------- generators


def _make_mnist(out: Path, repeat: int = 1) -> None:
    """The four MNIST IDX files (uncompressed) from scikit-learn's digits resampled to 28x28."""
    split = load_digits_28x28(seed=_SEED, repeat=repeat)
    for role, filename in IDX_NAMES.items():
        array = getattr(split, role)
        if role.startswith("x_"):
            array = np.rint(array * 255.0)
        write_idx(out / filename, array.astype(np.uint8))


def _make_bigearthnet(out: Path) -> None:
    """A few BigEarthNet-S2 patch folders: 12 uint16 bands at their native 120/60/20 px, labels JSON."""
    patches = synthetic_bigearthnet(_BIGEARTHNET_PATCHES, size=120, seed=_SEED)
    for i in range(len(patches.names)):
        bands = {}
        for c, band in enumerate(BANDS):
            side = BAND_PIXELS[band]
            factor = 120 // side  # block mean: what a coarser sensor pixel sees
            reflectance = patches.images[i, :, :, c].reshape(side, factor, side, factor).mean(axis=(1, 3))
            bands[band] = np.clip(np.rint(reflectance / _BIGEARTHNET_SCALE), 0, 65535).astype(np.uint16)
        labels = [patches.label_names[j] for j in np.flatnonzero(patches.labels[i])]
        name = f"S2A_MSIL2A_20170613T101031_{i // 4}_{i % 4}"  # BigEarthNet v1 naming: tile, row, column
        write_bigearthnet_patch(
            out,
            name,
            bands,
            labels,
            metadata={"tile_source": f"workbench reduced set (synthetic_bigearthnet, seed {_SEED})"},
        )


def _make_image_folder(out: Path) -> None:
    """Class folders of photo crops: one class per photo scikit-learn ships, half JPEG, half PNG."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    rng = np.random.default_rng(_SEED)
    photos = load_sample_images()
    for photo, filename in zip(photos.images, photos.filenames):
        class_dir = out / Path(filename).stem
        class_dir.mkdir()
        height, width = photo.shape[:2]
        for k in range(_IMAGES_PER_CLASS):
            top = int(rng.integers(0, height - _IMAGE_SIDE + 1))
            left = int(rng.integers(0, width - _IMAGE_SIDE + 1))
            crop = photo[top : top + _IMAGE_SIDE, left : left + _IMAGE_SIDE]
            if rng.random() < 0.5:
                crop = crop[:, ::-1]
            image = Image.fromarray(np.ascontiguousarray(crop))
            if k % 2:
                image.save(class_dir / f"{class_dir.name}_{k:03d}.png")
            else:
                image.save(class_dir / f"{class_dir.name}_{k:03d}.jpg", quality=90)


def _make_mnist_jittered(out: Path) -> None:
    """MNIST IDX files with shifted, noisy copies of each digit: 11 504 train / 2 872 test images."""
    _make_mnist(out, repeat=_JITTERED_REPEAT)


_GENERATORS: dict[str, Callable[[Path], None]] = {
    "mnist": _make_mnist,
    "mnist_jittered": _make_mnist_jittered,
    "bigearthnet": _make_bigearthnet,
    "image_folder": _make_image_folder,
}


# --------------------------------------------------------------------------- reduced copies


def _files(folder: Path) -> dict[str, int]:
    """Relative path -> size of every file under ``folder`` except the manifest."""
    return {
        p.relative_to(folder).as_posix(): p.stat().st_size
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != _MANIFEST
    }


def _is_complete(folder: Path, name: str) -> bool:
    """Whether ``folder`` is a finished copy of this version with every listed file at its size."""
    try:
        manifest = json.loads((folder / _MANIFEST).read_text(encoding="utf-8"))
        if manifest.get("name") != name or manifest.get("version") != _VERSION:
            return False
        return all((folder / rel).stat().st_size == size for rel, size in manifest["files"].items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path``: ranks generating the same set wait for one another."""
    import fcntl  # POSIX only, like MPI and Horovod; imported here so the package imports anywhere

    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_reduced(name: str, *, root: str | Path | None = None) -> Path:
    """The reduced set ``name`` under ``<root>/reduced/<name>/``, generated on first use.

    ``root`` defaults to ``data_root()``. A finished copy is returned as it is (no file is
    rewritten); a missing, partial or outdated one is generated into a temporary folder and renamed
    into place, so a crash never leaves half a dataset where a loader would find it. Folders left
    by a crashed generation are removed on the next one.
    """
    if name not in _GENERATORS:
        raise ValueError(f"ensure_reduced: unknown set {name!r}; choose one of {', '.join(REDUCED_SETS)}")
    base = _base(root) / "reduced"
    target = base / name
    if _is_complete(target, name):
        return target
    base.mkdir(parents=True, exist_ok=True)
    with _locked(base / f".{name}.lock"):
        if _is_complete(target, name):  # another rank made it while this one waited
            return target
        for leftover in base.glob(f".{name}.*-*"):  # under the lock, nobody else is writing these
            shutil.rmtree(leftover, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=base))
        tmp.chmod(0o755)  # mkdtemp's 0o700 would hide the set from other users of a shared data/
        try:
            _GENERATORS[name](tmp)
            manifest = {"name": name, "version": _VERSION, "seed": _SEED, "files": _files(tmp)}
            (tmp / _MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
            if target.exists():  # partial or outdated: move it out of the way in one step, then delete
                stale = Path(tempfile.mkdtemp(prefix=f".{name}.old-", dir=base))
                target.rename(stale / name)
                shutil.rmtree(stale, ignore_errors=True)
            tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


# --------------------------------------------------------------------------- real data first


def _has_entries(folder: Path) -> bool:
    """Whether ``folder`` exists with anything in it besides hidden files (``.gitkeep``)."""
    return folder.is_dir() and any(not p.name.startswith(".") for p in folder.iterdir())


def _real_set_problem(name: str, folder: Path) -> str | None:
    """What is wrong with the real set in ``folder`` (None: usable). Stops at the first good file."""
    if name in ("mnist", "mnist_jittered"):
        if find_idx_files(folder) is None:
            return "does not hold the four MNIST IDX files (" + ", ".join(IDX_NAMES.values()) + ", or .gz)"
    elif name == "bigearthnet":
        dirs = (d for d in folder.iterdir() if d.is_dir())
        if not any(is_patch_folder(d) for d in dirs):
            return "holds no BigEarthNet patch folders (<patch>/<patch>_B01.tif ... <patch>_labels_metadata.json)"
    elif name == "image_folder":
        images = (
            f
            for d in folder.iterdir()
            if d.is_dir() and not d.name.startswith(".")
            for f in d.rglob("*")
            if f.suffix.lower() in IMAGE_SUFFIXES
        )
        if next(images, None) is None:
            return f"holds no <class>/<image> files ({', '.join(IMAGE_SUFFIXES)})"
    return None


def dataset_path(name: str, *, root: str | Path | None = None, reduced: str | None = None) -> Path:
    """The folder to read set ``name`` from: the real one in ``<root>/<name>/`` if any, else the reduced.

    ``reduced`` names the reduced set to fall back to when it is not ``name`` (the input-pipeline
    case reads real MNIST, else ``mnist_jittered``: more distinct batches than ``mnist``). A real
    folder that holds files but not the expected ones is an error rather than a silent switch to
    the reduced set: a run on the wrong data costs more than a clear message now.
    """
    reduced = reduced or name
    if name not in _GENERATORS or reduced not in _GENERATORS:
        wrong = name if name not in _GENERATORS else reduced
        raise ValueError(f"dataset_path: unknown set {wrong!r}; choose one of {', '.join(REDUCED_SETS)}")
    base = _base(root)
    real = base / name
    if _has_entries(real):
        problem = _real_set_problem(name, real)
        if problem:
            raise FileNotFoundError(
                f"{real}: {problem}; complete it as data/README.md says, or empty it to use the reduced set"
            )
        return real
    return ensure_reduced(reduced, root=base)


def mnist_path(*, root: str | Path | None = None) -> Path:
    """Folder of the MNIST IDX files: real MNIST in ``<root>/mnist/`` if present, else the reduced."""
    return dataset_path("mnist", root=root)
