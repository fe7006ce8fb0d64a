"""Tests for workbench.datasets: every loader on tiny hand-written files, corrupt inputs, seeds."""

from __future__ import annotations

import gzip
import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile
from PIL import Image

from workbench import datasets
from workbench.datasets import (
    BAND_PIXELS,
    BANDS,
    LABELS_19,
    LABELS_43,
    Split,
    load,
    load_bigearthnet_patches,
    load_digits_28x28,
    load_image_folder,
    load_mnist_idx,
    load_mnist_npz,
    read_image,
    read_png,
    read_pnm,
    read_tiff,
    resize,
    synthetic_bigearthnet,
    synthetic_mnist,
    write_bigearthnet_patch,
    write_tiff,
)

# --------------------------------------------------------------------------- file writers


def write_idx(path: Path, array: np.ndarray, *, magic: bytes | None = None, gz: bool = False) -> Path:
    """IDX as MNIST ships it: 00 00 08 <ndim>, big-endian uint32 dims, then uint8 data."""
    array = np.asarray(array, dtype=np.uint8)
    header = magic if magic is not None else bytes([0, 0, 0x08, array.ndim])
    data = header + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def tiny_mnist() -> dict[str, np.ndarray]:
    x_train = np.zeros((3, 28, 28), dtype=np.uint8)
    x_train[0, 0, 0] = 255
    x_train[1, 5, 7] = 51  # -> 0.2
    x_train[2] = 102  # -> 0.4 everywhere
    x_test = np.zeros((2, 28, 28), dtype=np.uint8)
    x_test[1, 27, 27] = 255
    return {
        "x_train": x_train,
        "y_train": np.array([3, 1, 4], dtype=np.uint8),
        "x_test": x_test,
        "y_test": np.array([1, 5], dtype=np.uint8),
    }


def write_mnist_dir(directory: Path, *, gz: bool = False, dotted: bool = False) -> dict[str, np.ndarray]:
    arrays = tiny_mnist()
    names = {
        "x_train": "train-images-idx3-ubyte",
        "y_train": "train-labels-idx1-ubyte",
        "x_test": "t10k-images-idx3-ubyte",
        "y_test": "t10k-labels-idx1-ubyte",
    }
    directory.mkdir(parents=True, exist_ok=True)
    for role, name in names.items():
        if dotted:
            name = name.replace("-idx", ".idx")
        write_idx(directory / name, arrays[role], gz=gz)
    return arrays


def write_png(path: Path, image: np.ndarray, **save_args: object) -> Path:
    """(h, w, c) uint8 (c = 1..4) or (h, w, 1) uint16 as a PNG, written by Pillow."""
    mode = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}[image.shape[-1]]
    array = image[..., 0] if image.shape[-1] == 1 else image
    Image.fromarray(array, None if image.dtype == np.uint16 else mode).save(path, format="PNG", **save_args)
    return path


def write_tiff_as(path: Path, array: np.ndarray, *, order: str = "<", rows_per_strip: int | None = None) -> Path:
    """One band as a strip TIFF in byte order ``order``, written by tifffile (as GDAL lays them out)."""
    tifffile.imwrite(path, array, byteorder=order, rowsperstrip=rows_per_strip, photometric="minisblack")
    return path


# --------------------------------------------------------------------------- MNIST


def check_tiny_split(split: Split) -> None:
    assert split.x_train.shape == (3, 28, 28) and split.x_test.shape == (2, 28, 28)
    assert split.x_train.dtype == np.float32 and split.y_train.dtype == np.int64
    assert split.x_train[0, 0, 0] == 1.0 and split.x_train[0].sum() == 1.0
    assert split.x_train[1, 5, 7] == pytest.approx(0.2)
    assert np.allclose(split.x_train[2], 0.4)
    assert split.x_test[1, 27, 27] == 1.0
    assert split.y_train.tolist() == [3, 1, 4] and split.y_test.tolist() == [1, 5]
    assert split.num_classes == 6


@pytest.mark.parametrize(("gz", "dotted"), [(False, False), (True, False), (False, True), (True, True)])
def test_mnist_idx_hand_checked(tmp_path: Path, gz: bool, dotted: bool) -> None:
    write_mnist_dir(tmp_path, gz=gz, dotted=dotted)
    check_tiny_split(load_mnist_idx(tmp_path))


def test_mnist_idx_wrong_magic(tmp_path: Path) -> None:
    write_mnist_dir(tmp_path)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.array([1, 5]), magic=b"\x12\x34\x08\x01")
    with pytest.raises(ValueError, match=r"t10k-labels-idx1-ubyte: bad IDX magic"):
        load_mnist_idx(tmp_path)


def test_mnist_idx_labels_file_in_images_slot(tmp_path: Path) -> None:
    write_mnist_dir(tmp_path)
    write_idx(tmp_path / "train-images-idx3-ubyte", np.array([1, 2, 3]))
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte: expected a 3-d"):
        load_mnist_idx(tmp_path)


def test_mnist_idx_truncated(tmp_path: Path) -> None:
    write_mnist_dir(tmp_path)
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte: truncated"):
        load_mnist_idx(tmp_path)


def test_mnist_idx_truncated_gzip(tmp_path: Path) -> None:
    write_mnist_dir(tmp_path, gz=True)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(path.read_bytes()[:30])
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte.gz: not a readable gzip"):
        load_mnist_idx(tmp_path)


def test_mnist_idx_mismatch_and_range(tmp_path: Path) -> None:
    write_mnist_dir(tmp_path)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.array([1, 2]))
    with pytest.raises(ValueError, match=r"3 images but .*train-labels-idx1-ubyte has 2 labels"):
        load_mnist_idx(tmp_path)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.array([1, 2, 10]))
    with pytest.raises(ValueError, match=r"labels outside 0..9"):
        load_mnist_idx(tmp_path)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.array([1, 2, 3]))
    write_idx(tmp_path / "train-images-idx3-ubyte", np.zeros((3, 5, 5)))
    with pytest.raises(ValueError, match=r"expected \(n, 28, 28\)"):
        load_mnist_idx(tmp_path)


def test_mnist_idx_missing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such directory"):
        load_mnist_idx(tmp_path / "nope")
    write_mnist_dir(tmp_path)
    (tmp_path / "t10k-images-idx3-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match=r"missing MNIST file\(s\) t10k-images-idx3-ubyte;"):
        load_mnist_idx(tmp_path)


def test_mnist_npz_hand_checked(tmp_path: Path) -> None:
    np.savez(tmp_path / "mnist.npz", **tiny_mnist())
    check_tiny_split(load_mnist_npz(tmp_path / "mnist.npz"))
    np.savez_compressed(tmp_path / "c.npz", **tiny_mnist())
    check_tiny_split(load_mnist_npz(tmp_path / "c.npz"))


def test_mnist_npz_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"mnist\.npz"):
        load_mnist_npz(tmp_path / "missing.npz")
    arrays = tiny_mnist()
    del arrays["y_test"]
    np.savez(tmp_path / "partial.npz", **arrays)
    with pytest.raises(ValueError, match=r"partial.npz: missing array\(s\) y_test"):
        load_mnist_npz(tmp_path / "partial.npz")
    (tmp_path / "junk.npz").write_bytes(b"this is not a zip archive at all")
    with pytest.raises(ValueError, match=r"junk.npz: not a readable .npz"):
        load_mnist_npz(tmp_path / "junk.npz")
    np.save(tmp_path / "single.npy", np.zeros(3))
    (tmp_path / "single.npy").rename(tmp_path / "single.npz")
    with pytest.raises(ValueError, match=r"single.npz: not a readable .npz"):
        load_mnist_npz(tmp_path / "single.npz")
    full = (tmp_path / "mnist.npz").with_name("trunc.npz")
    np.savez(full, **tiny_mnist())
    full.write_bytes(full.read_bytes()[:200])
    with pytest.raises(ValueError, match=r"trunc.npz: not a readable .npz"):
        load_mnist_npz(full)


# --------------------------------------------------------------------------- resize


def test_resize_hand_checked() -> None:
    a = np.array([[0.0, 1.0], [2.0, 3.0]])
    up = resize(a, (4, 4))
    assert up.dtype == np.float32
    assert np.allclose(up[0], [0.0, 0.25, 0.75, 1.0])
    assert np.allclose(up[:, 0], [0.0, 0.5, 1.5, 2.0])
    near = resize(a, (4, 4), method="nearest")
    assert np.array_equal(near, np.repeat(np.repeat(a, 2, 0), 2, 1))
    assert np.array_equal(resize(a, (2, 2)), a)
    batch = np.stack([a, a + 10])[..., None].repeat(3, -1)  # (2, 2, 2, 3), spatial axes 1, 2
    out = resize(batch, (4, 4), axes=(1, 2))
    assert out.shape == (2, 4, 4, 3) and np.allclose(out[1, 0, :, 2], [10, 10.25, 10.75, 11])
    with pytest.raises(ValueError, match="method"):
        resize(a, (4, 4), method="cubic")


# --------------------------------------------------------------------------- digits


def test_digits_shape_range_and_stratification() -> None:
    split = load_digits_28x28()
    assert split.x_train.shape == (1438, 28, 28) and split.x_test.shape == (359, 28, 28)
    assert split.x_train.dtype == np.float32 and split.y_train.dtype == np.int64
    for x in (split.x_train, split.x_test):
        assert x.min() == 0.0 and x.max() <= 1.0 and x.max() > 0.9
    counts = np.bincount(split.y_test, minlength=10)
    total = counts + np.bincount(split.y_train, minlength=10)
    assert np.all(np.abs(counts - 0.2 * total) <= 1)
    assert split.num_classes == 10


def test_digits_seeded() -> None:
    a, b, c = load_digits_28x28(seed=1), load_digits_28x28(seed=1), load_digits_28x28(seed=2)
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.y_train, c.y_train)


def test_digits_repeat() -> None:
    base = load_digits_28x28(seed=3)
    big = load_digits_28x28(seed=3, repeat=3)
    assert len(big.x_train) == 3 * len(base.x_train) and len(big.x_test) == 3 * len(base.x_test)
    assert big.x_train.min() >= 0.0 and big.x_train.max() <= 1.0
    assert np.array_equal(np.bincount(big.y_test), 3 * np.bincount(base.y_test))
    assert np.array_equal(big.x_train, load_digits_28x28(seed=3, repeat=3).x_train)
    with pytest.raises(ValueError, match="repeat"):
        load_digits_28x28(repeat=0)


# --------------------------------------------------------------------------- synthetic


def nearest_centroid_accuracy(split: Split) -> float:
    x_tr = split.x_train.reshape(len(split.x_train), -1)
    x_te = split.x_test.reshape(len(split.x_test), -1)
    centroids = np.stack([x_tr[split.y_train == k].mean(0) for k in range(10)])
    pred = np.argmin(((x_te[:, None, :] - centroids[None]) ** 2).sum(-1), axis=1)
    return float((pred == split.y_test).mean())


def test_synthetic_mnist_shape_seed_and_learnable() -> None:
    a = synthetic_mnist(2000, 500, seed=5)
    assert a.x_train.shape == (2000, 28, 28) and a.x_test.shape == (500, 28, 28)
    assert a.x_train.dtype == np.float32 and a.y_train.dtype == np.int64
    assert a.x_train.min() >= 0.0 and a.x_train.max() <= 1.0
    assert np.array_equal(np.bincount(a.y_train), np.full(10, 200))
    b = synthetic_mnist(2000, 500, seed=5)
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.x_train, synthetic_mnist(2000, 500, seed=6).x_train)
    assert nearest_centroid_accuracy(a) > 0.8  # chance is 0.1


def test_synthetic_bigearthnet() -> None:
    p = synthetic_bigearthnet(600, size=24, seed=1)
    assert p.images.shape == (600, 24, 24, 12) and p.images.dtype == np.float32
    assert p.labels.shape == (600, 43) and p.label_names == LABELS_43
    per_patch = p.labels.sum(1)
    assert per_patch.min() >= 1 and per_patch.max() <= 12 and set(np.unique(p.labels)) <= {0.0, 1.0}
    q = synthetic_bigearthnet(600, size=24, seed=1)
    assert np.array_equal(p.images, q.images) and np.array_equal(p.labels, q.labels)
    assert not np.array_equal(p.labels, synthetic_bigearthnet(600, size=24, seed=2).labels)
    # learnable: per-patch mean spectrum linearly predicts the labels far better than chance
    feats = np.concatenate([p.images.mean((1, 2)), np.ones((600, 1), np.float32)], axis=1)
    w, *_ = np.linalg.lstsq(feats[:400], p.labels[:400], rcond=None)
    pred, truth = feats[400:] @ w, p.labels[400:]
    corr = np.corrcoef(pred.ravel(), truth.ravel())[0, 1]
    assert corr > 0.3
    assert synthetic_bigearthnet(3, size=8, bands=4, labels=19).label_names == LABELS_19


def test_bigearthnet_label_names() -> None:
    assert len(LABELS_43) == len(set(LABELS_43)) == 43 and len(LABELS_19) == 19
    assert LABELS_43[0] == "Continuous urban fabric" and LABELS_43[-1] == "Sea and ocean"
    assert len(BANDS) == 12 and BANDS[8] == "B8A"


# --------------------------------------------------------------------------- TIFF and BigEarthNet patches


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("dtype", [np.uint16, np.int16, np.float32])
def test_read_tiff_roundtrip(tmp_path: Path, order: str, dtype: type) -> None:
    array = (np.arange(35).reshape(5, 7) * 3 - 10).astype(dtype)
    if np.dtype(dtype).kind == "u":
        array = np.abs(array).astype(dtype)
    path = write_tiff_as(tmp_path / "b.tif", array, order=order, rows_per_strip=2)  # 3 strips
    with tifffile.TiffFile(path) as tif:  # the file really is in that byte order, in strips
        assert tif.byteorder == order and len(tif.pages.first.dataoffsets) == 3
    back = read_tiff(path)
    assert back.dtype == np.dtype(dtype) and back.dtype.isnative
    assert np.array_equal(back, array)


def test_read_tiff_tiled_deflate_bigtiff(tmp_path: Path) -> None:
    array = np.arange(64 * 48, dtype=np.uint16).reshape(64, 48)
    path = tmp_path / "tz.tif"
    tifffile.imwrite(path, array, tile=(16, 16), compression="zlib", bigtiff=True, byteorder=">")
    assert np.array_equal(read_tiff(path), array)


def _set_compression_tag(path: Path, code: int) -> None:
    """Overwrite the Compression tag of an uncompressed file: a codec the data do not match."""
    with tifffile.TiffFile(path) as tif:
        where, order = tif.pages.first.tags["Compression"].valueoffset, tif.byteorder
    data = bytearray(path.read_bytes())
    data[where : where + 2] = struct.pack(f"{order}H", code)
    path.write_bytes(bytes(data))


def test_read_tiff_errors(tmp_path: Path) -> None:
    a = np.ones((40, 40), np.uint16)
    path = write_tiff_as(tmp_path / "d.tif", a)
    _set_compression_tag(path, 8)  # deflate, but the strips are raw: zlib fails inside tifffile
    with pytest.raises(ValueError, match=r"d.tif: cannot decode its ADOBE_DEFLATE compression .*; re-copy it"):
        read_tiff(path)
    (tmp_path / "n.tif").write_bytes(b"GIF89a....")
    with pytest.raises(ValueError, match=r"n.tif: not a readable TIFF \(not a TIFF file.*\); re-copy the file"):
        read_tiff(tmp_path / "n.tif")
    (tmp_path / "e.tif").write_bytes(b"")
    with pytest.raises(ValueError, match=r"e.tif: not a readable TIFF"):
        read_tiff(tmp_path / "e.tif")
    path = write_tiff_as(tmp_path / "t.tif", a)
    path.write_bytes(path.read_bytes()[:1000])  # cut inside the pixel data
    with pytest.raises(ValueError, match=r"t.tif: not a readable TIFF \(failed to read"):
        read_tiff(path)
    tifffile.imwrite(tmp_path / "rgb.tif", np.ones((4, 4, 3), np.uint8), photometric="rgb")
    with pytest.raises(ValueError, match=r"rgb.tif: 3 samples per pixel.*holds one 2-d band"):
        read_tiff(tmp_path / "rgb.tif")
    with pytest.raises(FileNotFoundError):
        read_tiff(tmp_path / "missing.tif")


def test_read_tiff_codec_needs_imagecodecs(tmp_path: Path) -> None:
    try:
        import imagecodecs  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("imagecodecs is installed: LZW is decodable here")
    path = write_tiff_as(tmp_path / "l.tif", np.ones((4, 4), np.uint16))
    _set_compression_tag(path, 5)  # LZW
    with pytest.raises(ValueError, match=r"l.tif: cannot decode its LZW compression .*pip install imagecodecs"):
        read_tiff(path)


def test_write_tiff_rejects_non_band(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="2-d"):
        write_tiff(tmp_path / "x.tif", np.ones((2, 2, 3), np.uint16))


BAND_SIZES = {"B01": 20, "B09": 20, "B02": 120, "B03": 120, "B04": 120, "B08": 120}


def write_patch(root: Path, name: str, labels: list[str], base: int, *, skip: str | None = None) -> Path:
    """A BigEarthNet-S2 patch folder; band c is constant ``base + 100 * c`` except B01, a 20x20 ramp."""
    d = root / name
    d.mkdir(parents=True)
    for c, band in enumerate(BANDS):
        if band == skip:
            continue
        side = BAND_SIZES.get(band, 60)
        if band == "B01":
            array = (np.arange(side * side).reshape(side, side) + base).astype(np.uint16)
        else:
            array = np.full((side, side), base + 100 * c, dtype=np.uint16)
        order = ">" if c % 2 else "<"
        dtype = np.int16 if band == "B11" else np.uint16
        write_tiff_as(d / f"{name}_{band}.tif", array.astype(dtype), order=order, rows_per_strip=7)
    (d / f"{name}_labels_metadata.json").write_text(json.dumps({"labels": labels, "tile_source": "x"}))
    return d


def test_bigearthnet_patches_hand_checked(tmp_path: Path) -> None:
    write_patch(tmp_path, "S2A_p2", ["Bare rock", "Pastures"], base=2000)
    write_patch(tmp_path, "S2A_p1", ["Sea and ocean", "Continuous urban fabric"], base=1000)
    (tmp_path / "not_a_patch").mkdir()
    p = load_bigearthnet_patches(tmp_path)
    assert p.names == ("S2A_p1", "S2A_p2")
    assert p.images.shape == (2, 120, 120, 12) and p.images.dtype == np.float32
    for c in range(1, 12):  # constant bands survive resampling exactly, scaled by 1e-4
        assert np.allclose(p.images[0, :, :, c], (1000 + 100 * c) * 1e-4)
        assert np.allclose(p.images[1, :, :, c], (2000 + 100 * c) * 1e-4)
    assert p.labels.shape == (2, 43)
    assert np.flatnonzero(p.labels[0]).tolist() == [0, 42]
    assert np.flatnonzero(p.labels[1]).tolist() == [17, 30]
    # B01 (20x20 ramp) nearest-upsampled to 40: every source pixel becomes a 2x2 block
    near = load_bigearthnet_patches(tmp_path, size=40, method="nearest", scale=1.0, bands=("B01", "B02"))
    ramp = np.arange(400).reshape(20, 20) + 1000.0
    assert near.images.shape == (2, 40, 40, 2)
    assert np.array_equal(near.images[0, :, :, 0], np.repeat(np.repeat(ramp, 2, 0), 2, 1))
    # one patch folder given directly, and limit
    assert load_bigearthnet_patches(tmp_path / "S2A_p2").names == ("S2A_p2",)
    assert load_bigearthnet_patches(tmp_path, limit=1).names == ("S2A_p1",)


def test_bigearthnet_19_classes(tmp_path: Path) -> None:
    write_patch(tmp_path, "p", ["Bare rock", "Pastures", "Sea and ocean", "Salines"], base=500)
    p = load_bigearthnet_patches(tmp_path, size=20, nomenclature=19)
    assert p.label_names == LABELS_19 and p.labels.shape == (1, 19)
    # Bare rock is dropped in BigEarthNet-19; Pastures -> 4, Salines -> Coastal wetlands 16, Sea -> 18
    assert np.flatnonzero(p.labels[0]).tolist() == [4, 16, 18]


def test_bigearthnet_errors(tmp_path: Path) -> None:
    write_patch(tmp_path / "a", "p", ["Pastures", "Lava lake"], base=1)
    with pytest.raises(ValueError, match=r"p_labels_metadata.json: unknown label 'Lava lake'"):
        load_bigearthnet_patches(tmp_path / "a")
    write_patch(tmp_path / "b", "q", ["Pastures"], base=1, skip="B8A")
    with pytest.raises(FileNotFoundError, match=r"q_B8A.tif: missing band B8A"):
        load_bigearthnet_patches(tmp_path / "b")
    (tmp_path / "c").mkdir()
    with pytest.raises(FileNotFoundError, match="no BigEarthNet patch folders"):
        load_bigearthnet_patches(tmp_path / "c")
    d = write_patch(tmp_path / "d", "r", ["Pastures"], base=1)
    (d / "r_labels_metadata.json").write_text("{not json")
    with pytest.raises(ValueError, match="not BigEarthNet label metadata"):
        load_bigearthnet_patches(d)
    with pytest.raises(ValueError, match="unknown band"):
        load_bigearthnet_patches(d, bands=("B10",))


def test_write_bigearthnet_patch_roundtrip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    bands = {b: rng.integers(0, 10_000, size=(BAND_PIXELS[b],) * 2, dtype=np.uint16) for b in BANDS}
    folder = write_bigearthnet_patch(tmp_path, "S2B_x_1_2", bands, ["Pastures", "Bare rock"], metadata={"k": 1})
    assert folder == tmp_path / "S2B_x_1_2"
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f"S2B_x_1_2_{b}.tif" for b in BANDS] + ["S2B_x_1_2_labels_metadata.json"]
    )
    meta = json.loads((folder / "S2B_x_1_2_labels_metadata.json").read_text())
    assert meta == {"labels": ["Pastures", "Bare rock"], "k": 1}
    for band, array in bands.items():
        back = read_tiff(folder / f"S2B_x_1_2_{band}.tif")
        assert back.dtype == np.uint16 and np.array_equal(back, array)
    p = load_bigearthnet_patches(tmp_path, scale=1.0, method="nearest")
    assert np.array_equal(p.images[0, :, :, BANDS.index("B02")], bands["B02"].astype(np.float32))
    assert np.flatnonzero(p.labels[0]).tolist() == [17, 30]
    with pytest.raises(ValueError, match=r"unknown band\(s\) \['B10'\]"):
        write_bigearthnet_patch(tmp_path, "y", {"B10": bands["B01"]}, ["Pastures"])
    with pytest.raises(ValueError, match=r"unknown label\(s\) \['Lava lake'\]"):
        write_bigearthnet_patch(tmp_path, "y", bands, ["Lava lake"])
    assert not (tmp_path / "y").exists()


# --------------------------------------------------------------------------- PNG / PNM / image folders


def test_png_tiny_hand_checked(tmp_path: Path) -> None:
    path = write_png(tmp_path / "g.png", np.array([[[0], [255]], [[128], [7]]], dtype=np.uint8))
    back = read_png(path)
    assert back.shape == (2, 2, 1) and back[..., 0].tolist() == [[0, 255], [128, 7]]


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
@pytest.mark.parametrize("interlace", [0, 1])
def test_png_roundtrip(tmp_path: Path, channels: int, interlace: int) -> None:
    image = np.random.default_rng(channels).integers(0, 256, size=(10, 9, channels), dtype=np.uint8)
    back = read_png(write_png(tmp_path / "x.png", image, interlace=interlace))
    assert back.dtype == np.uint8 and np.array_equal(back, image)


def test_png_16bit_and_palette(tmp_path: Path) -> None:
    image = np.array([[[0], [65535]], [[256], [1]]], dtype=np.uint16)
    back = read_png(write_png(tmp_path / "d.png", image))
    assert back.dtype == np.uint16 and np.array_equal(back, image)
    rgb = np.array([[[255, 0, 0], [0, 0, 255]]], dtype=np.uint8)
    Image.fromarray(rgb).convert("P").save(tmp_path / "p.png")  # a palette PNG comes back as RGB
    assert read_png(tmp_path / "p.png").tolist() == rgb.tolist()


def test_png_errors(tmp_path: Path) -> None:
    image = np.random.default_rng(0).integers(0, 256, size=(40, 40, 3), dtype=np.uint8)
    good = write_png(tmp_path / "good.png", image).read_bytes()
    (tmp_path / "sig.png").write_bytes(b"GIF89a" + good[6:])
    with pytest.raises(ValueError, match=r"sig.png: not a PNG file \(Pillow cannot identify it.*\); re-save it as PNG"):
        read_png(tmp_path / "sig.png")
    broken = bytearray(good)
    broken[len(good) // 2] ^= 0xFF  # inside the IDAT chunk: only its CRC tells
    (tmp_path / "crc.png").write_bytes(bytes(broken))
    with pytest.raises(ValueError, match=r"crc.png: corrupt or truncated PNG file \(.*checksum.*\); re-copy it"):
        read_png(tmp_path / "crc.png")
    (tmp_path / "cut.png").write_bytes(good[: len(good) // 2])
    with pytest.raises(ValueError, match=r"cut.png: corrupt or truncated PNG file"):
        read_png(tmp_path / "cut.png")
    Image.fromarray(image).save(tmp_path / "photo.png", format="JPEG")
    with pytest.raises(ValueError, match=r"photo.png: not a PNG file \(it holds JPEG\)"):
        read_png(tmp_path / "photo.png")
    assert read_image(tmp_path / "photo.png").shape == (40, 40, 3)  # read_image goes by content
    with pytest.raises(ValueError, match=r"x.gif: unsupported image type '.gif'"):
        read_image(tmp_path / "x.gif")


def test_pnm(tmp_path: Path) -> None:
    (tmp_path / "a.pgm").write_bytes(b"P5\n# a comment\n3 2\n255\n" + bytes([0, 1, 2, 3, 4, 255]))
    image, full = read_pnm(tmp_path / "a.pgm")
    assert full == 255 and image.shape == (2, 3, 1) and image[..., 0].tolist() == [[0, 1, 2], [3, 4, 255]]
    (tmp_path / "b.pgm").write_bytes(b"P5 2 1 65535\n" + struct.pack(">2H", 65535, 256))
    image, full = read_pnm(tmp_path / "b.pgm")
    assert full == 65535 and image.dtype == np.uint16 and image[..., 0].tolist() == [[65535, 256]]
    (tmp_path / "m.pgm").write_bytes(b"P5 2 1 1000\n" + struct.pack(">2H", 1000, 500))  # rescaled to 65535
    image, full = read_pnm(tmp_path / "m.pgm")
    assert full == 65535 and image[..., 0].tolist() == [[65535, 32768]]
    (tmp_path / "c.ppm").write_bytes(b"P6 1 1 255\n" + bytes([10, 20, 30]))
    image, full = read_pnm(tmp_path / "c.ppm")
    assert full == 255 and image.tolist() == [[[10, 20, 30]]]
    (tmp_path / "t.pgm").write_bytes(b"P5 4 4 255\n" + bytes(5))
    with pytest.raises(ValueError, match=r"t.pgm: corrupt or truncated PGM/PPM file \(image file is truncated"):
        read_pnm(tmp_path / "t.pgm")
    write_png(tmp_path / "p.pgm", np.zeros((2, 2, 1), np.uint8))
    with pytest.raises(ValueError, match=r"p.pgm: not a PGM/PPM file \(it holds PNG\); re-save it as PGM/PPM"):
        read_pnm(tmp_path / "p.pgm")


def test_image_folder(tmp_path: Path) -> None:
    (tmp_path / "dog").mkdir()
    (tmp_path / "cat").mkdir()
    (tmp_path / ".ipynb_checkpoints").mkdir()
    write_png(tmp_path / "cat" / "a.png", np.full((2, 2, 3), 255, np.uint8))
    (tmp_path / "cat" / "b.pgm").write_bytes(b"P5 2 2 255\n" + bytes([0, 0, 0, 0]))
    rgba = np.zeros((4, 4, 4), np.uint8)
    rgba[..., 0], rgba[..., 3] = 255, 10  # pure red, alpha dropped
    write_png(tmp_path / "dog" / "c.png", rgba)
    (tmp_path / "dog" / "c.ppm").write_bytes(b"P6 2 2 255\n" + bytes([0, 255, 0] * 4))
    Image.fromarray(np.full((8, 8, 3), (0, 0, 255), np.uint8)).save(tmp_path / "dog" / "d.JPEG", quality=95)
    (tmp_path / "dog" / "notes.txt").write_text("ignored")
    folder = load_image_folder(tmp_path, size=(4, 4))
    assert folder.class_names == ("cat", "dog")
    assert folder.images.shape == (5, 4, 4, 3) and folder.images.dtype == np.float32
    assert folder.labels.tolist() == [0, 0, 1, 1, 1]
    assert [p.name for p in folder.paths] == ["a.png", "b.pgm", "c.png", "c.ppm", "d.JPEG"]
    assert np.allclose(folder.images[0], 1.0) and np.allclose(folder.images[1], 0.0)
    assert np.allclose(folder.images[2], [1.0, 0.0, 0.0]) and np.allclose(folder.images[3], [0.0, 1.0, 0.0])
    assert np.allclose(folder.images[4], [0.0, 0.0, 1.0], atol=0.02)  # JPEG is lossy, barely on flat colour
    gray = load_image_folder(tmp_path, size=2, channels=1)
    assert gray.images.shape == (5, 2, 2, 1)
    assert np.allclose(gray.images[2], 0.299, atol=1e-6)
    with pytest.raises(ValueError, match=r"different sizes .* pass size=\(height, width\)"):
        load_image_folder(tmp_path)


def test_image_folder_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such directory"):
        load_image_folder(tmp_path / "nope")
    (tmp_path / "empty_class").mkdir()
    with pytest.raises(FileNotFoundError, match="no images found"):
        load_image_folder(tmp_path)
    (tmp_path / "empty_class" / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(ValueError, match=r"bad.png: not a PNG, JPEG or PGM/PPM file \(Pillow cannot identify"):
        load_image_folder(tmp_path)
    write_png(tmp_path / "empty_class" / "bad.png", np.zeros((9, 9, 3), np.uint8))
    (tmp_path / "empty_class" / "cut.jpg").write_bytes(b"\xff\xd8\xff\xe0" + bytes(20))
    with pytest.raises(ValueError, match=r"cut.jpg: .*JPEG"):
        load_image_folder(tmp_path)


# --------------------------------------------------------------------------- load() and import cost


def test_load_dispatch(tmp_path: Path) -> None:
    assert load("synthetic", n_train=20, n_test=10).x_train.shape == (20, 28, 28)
    assert load("digits").x_train.shape == (1438, 28, 28)
    write_mnist_dir(tmp_path / "idx", gz=True)
    check_tiny_split(load(tmp_path / "idx"))
    check_tiny_split(load(str(tmp_path / "idx")))
    np.savez(tmp_path / "m.npz", **tiny_mnist())
    check_tiny_split(load(tmp_path / "m.npz"))
    for bad in ("mnist-please", tmp_path, tmp_path / "none.npz"):
        with pytest.raises(
            ValueError, match=r"expected one of 'digits', 'synthetic', 'mnist', a directory with MNIST"
        ):
            load(bad)


def test_import_is_light() -> None:
    code = (
        "import sys, workbench.datasets; "
        "print(sorted({'tensorflow', 'sklearn', 'scipy', 'PIL', 'tifffile'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_public_api() -> None:
    for name in datasets.__all__:
        assert hasattr(datasets, name), name
