"""Tests for workbench.datasets.data_dir: where data live, and the reduced sets made on first use.

Every test points WORKBENCH_DATA at its own tmp_path, so nothing is written into the repo's data/.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import workbench
from workbench.datasets import (
    BAND_PIXELS,
    BANDS,
    DATA_ENV,
    REDUCED_SETS,
    data_dir,
    data_root,
    dataset_path,
    ensure_reduced,
    load,
    load_bigearthnet_patches,
    load_digits_28x28,
    load_image_folder,
    load_mnist_idx,
    mnist_path,
    read_tiff,
    synthetic_bigearthnet,
    write_bigearthnet_patch,
    write_idx,
)
from workbench.datasets.mnist import IDX_NAMES


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh data directory named by WORKBENCH_DATA."""
    data = tmp_path / "data"
    monkeypatch.setenv(DATA_ENV, str(data))
    return data


def snapshot(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Relative path -> (mtime_ns, inode, bytes) of every file under ``folder``."""
    return {
        p.relative_to(folder).as_posix(): (p.stat().st_mtime_ns, p.stat().st_ino, p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# --------------------------------------------------------------------------- data_root


def test_data_root_env_checkout_and_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "elsewhere"))
    assert data_root() == tmp_path / "elsewhere"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(DATA_ENV, "rel/data")
    assert data_root() == tmp_path / "rel" / "data"  # absolute, so ranks with another cwd agree
    monkeypatch.delenv(DATA_ENV)
    checkout = Path(workbench.__file__).resolve().parents[1]
    assert data_root() == checkout / "data"  # the tests run from a checkout
    assert (checkout / "data" / "README.md").is_file()
    monkeypatch.setattr(data_dir, "_is_checkout", lambda directory: False)  # as an installed package
    assert data_root() == tmp_path / "data"


# --------------------------------------------------------------------------- generation round-trips


def test_reduced_mnist_is_idx_of_the_digits(root: Path) -> None:
    path = ensure_reduced("mnist")
    assert path == root / "reduced" / "mnist"
    assert sorted(p.name for p in path.iterdir() if not p.name.startswith(".")) == sorted(IDX_NAMES.values())
    header = (path / "train-images-idx3-ubyte").read_bytes()[:16]
    assert header == bytes([0, 0, 8, 3]) + (1438).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2
    split = load_mnist_idx(path)
    digits = load_digits_28x28(seed=0)
    assert np.array_equal(split.y_train, digits.y_train) and np.array_equal(split.y_test, digits.y_test)
    assert np.abs(split.x_train - digits.x_train).max() <= 0.5 / 255 + 1e-6  # only uint8 rounding
    assert np.abs(split.x_test - digits.x_test).max() <= 0.5 / 255 + 1e-6
    assert mnist_path() == path
    loaded = load("mnist")
    assert np.array_equal(loaded.x_train, split.x_train)


def test_reduced_bigearthnet_is_patch_folders(root: Path) -> None:
    path = ensure_reduced("bigearthnet")
    patch_dirs = sorted(p for p in path.iterdir() if p.is_dir())
    assert len(patch_dirs) == 8
    first = patch_dirs[0]
    for band in BANDS:
        raster = read_tiff(first / f"{first.name}_{band}.tif")
        assert raster.dtype == np.uint16 and raster.shape == (BAND_PIXELS[band],) * 2
    meta = json.loads((first / f"{first.name}_labels_metadata.json").read_text())
    assert meta["labels"] and "reduced" in meta["tile_source"]
    patches = load_bigearthnet_patches(path)
    source = synthetic_bigearthnet(8, size=120, seed=0)
    assert patches.images.shape == (8, 120, 120, 12)
    assert np.array_equal(patches.labels, source.labels)
    for band in ("B02", "B03", "B04", "B08"):  # 10 m bands are stored at full size: only DN rounding
        c = BANDS.index(band)
        assert np.abs(patches.images[..., c] - source.images[..., c]).max() <= 0.5e-4 + 1e-6
    assert dataset_path("bigearthnet") == path


def test_reduced_image_folder_is_png_and_jpeg_classes(root: Path) -> None:
    path = ensure_reduced("image_folder")
    files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    assert {p.suffix for p in files} == {".jpg", ".png"}
    for p in files:
        with Image.open(p) as image:
            assert image.format == {".jpg": "JPEG", ".png": "PNG"}[p.suffix]
    folder = load_image_folder(path)
    assert folder.class_names == ("china", "flower")
    assert folder.images.shape == (24, 160, 160, 3)
    assert np.bincount(folder.labels).tolist() == [12, 12]
    means = [folder.images[folder.labels == k].mean(axis=(0, 1, 2)) for k in (0, 1)]
    assert np.abs(means[0] - means[1]).max() > 0.1  # two different photos, not blank images
    assert dataset_path("image_folder") == path


@pytest.mark.parametrize("name", REDUCED_SETS)
def test_generation_is_deterministic(tmp_path: Path, name: str) -> None:
    a = ensure_reduced(name, root=tmp_path / "a")
    b = ensure_reduced(name, root=tmp_path / "b")
    assert {k: v[2] for k, v in snapshot(a).items()} == {k: v[2] for k, v in snapshot(b).items()}


# --------------------------------------------------------------------------- reuse and atomicity


def test_second_call_reuses_without_rewriting(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = ensure_reduced("mnist")
    before = snapshot(path)
    time.sleep(0.01)

    def must_not_run(out: Path) -> None:
        raise AssertionError("regenerated a complete copy")

    monkeypatch.setitem(data_dir._GENERATORS, "mnist", must_not_run)
    assert ensure_reduced("mnist") == path
    assert mnist_path() == path
    assert snapshot(path) == before


def test_leftover_temp_folder_from_a_crash_is_ignored_and_removed(root: Path) -> None:
    crashed = root / "reduced" / ".mnist.tmp-crashed"
    crashed.mkdir(parents=True)
    (crashed / "train-images-idx3-ubyte").write_bytes(b"\0\0\x08\x03 half")
    path = ensure_reduced("mnist")
    assert not crashed.exists()
    assert load_mnist_idx(path).x_train.shape == (1438, 28, 28)


def test_crash_during_generation_leaves_nothing_visible(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(out: Path) -> None:
        write_idx(out / "train-images-idx3-ubyte", np.zeros((2, 28, 28), np.uint8))
        raise KeyboardInterrupt  # as a Ctrl-C or a killed rank would

    monkeypatch.setitem(data_dir._GENERATORS, "mnist", crash)
    with pytest.raises(KeyboardInterrupt):
        ensure_reduced("mnist")
    assert [p.name for p in (root / "reduced").iterdir()] == [".mnist.lock"]
    monkeypatch.undo()
    monkeypatch.setenv(DATA_ENV, str(root))
    assert load_mnist_idx(ensure_reduced("mnist")).y_test.shape == (359,)


def test_partial_or_outdated_copy_is_replaced(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = root / "reduced" / "mnist"
    target.mkdir(parents=True)
    (target / "train-images-idx3-ubyte").write_bytes(b"half a file, no manifest")
    path = ensure_reduced("mnist")
    assert load_mnist_idx(path).x_train.shape == (1438, 28, 28)
    (path / "t10k-labels-idx1-ubyte").unlink()  # a file lost afterwards: the manifest notices
    assert load_mnist_idx(ensure_reduced("mnist")).y_test.shape == (359,)
    inode = (path / "train-images-idx3-ubyte").stat().st_ino
    monkeypatch.setattr(data_dir, "_VERSION", data_dir._VERSION + 1)  # a newer generator
    ensure_reduced("mnist")
    assert (path / "train-images-idx3-ubyte").stat().st_ino != inode
    assert json.loads((path / ".manifest.json").read_text())["version"] == data_dir._VERSION
    assert sorted(p.name for p in (root / "reduced").iterdir()) == [".mnist.lock", "mnist"]


def test_ranks_starting_together_generate_once(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = data_dir._GENERATORS["mnist"]

    def slow(out: Path) -> None:
        calls.append(1)
        time.sleep(0.2)
        real(out)

    monkeypatch.setitem(data_dir._GENERATORS, "mnist", slow)
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(ensure_reduced("mnist"))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and results == [root / "reduced" / "mnist"] * 3


def test_unknown_set(root: Path) -> None:
    names = "mnist, mnist_jittered, bigearthnet, image_folder"
    with pytest.raises(ValueError, match=rf"unknown set 'cifar'; choose one of {names}"):
        ensure_reduced("cifar")
    with pytest.raises(ValueError, match="unknown set"):
        dataset_path("cifar")


# --------------------------------------------------------------------------- real data first


def test_real_mnist_is_preferred(root: Path) -> None:
    real = root / "mnist"
    real.mkdir(parents=True)
    (real / ".gitkeep").touch()
    assert mnist_path() == root / "reduced" / "mnist"  # hidden files only: treated as empty
    labels = np.array([7, 2], np.uint8)
    for role, filename in IDX_NAMES.items():
        write_idx(real / filename, np.full((2, 28, 28), 255, np.uint8) if role.startswith("x_") else labels)
    assert mnist_path() == real
    split = load("mnist")
    assert split.y_train.tolist() == [7, 2] and split.x_test.min() == 1.0
    (real / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match=r"mnist: does not hold the four MNIST IDX files.*data/README.md"):
        mnist_path()


def test_real_bigearthnet_and_image_folder_are_preferred(root: Path) -> None:
    (root / "bigearthnet" / "BigEarthNet-v1.0").mkdir(parents=True)  # extracted one level too deep
    with pytest.raises(FileNotFoundError, match="holds no BigEarthNet patch folders"):
        dataset_path("bigearthnet")
    bands = {b: np.full((BAND_PIXELS[b],) * 2, 1000, np.uint16) for b in BANDS}
    write_bigearthnet_patch(root / "bigearthnet", "S2A_real_0_0", bands, ["Pastures"])
    assert dataset_path("bigearthnet") == root / "bigearthnet"
    (root / "image_folder" / "cats").mkdir(parents=True)
    (root / "image_folder" / "cats" / "notes.txt").write_text("no images here")
    with pytest.raises(FileNotFoundError, match="holds no <class>/<image> files"):
        dataset_path("image_folder")
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(root / "image_folder" / "cats" / "a.png")
    assert dataset_path("image_folder") == root / "image_folder"
    assert not (root / "reduced").exists()  # real data present: nothing generated
