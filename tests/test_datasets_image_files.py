"""A site's own images: image folders (PNG/JPEG written here with PIL) and MedMNIST-style NPZ
files (written with numpy), loaded directly and through real federated runs of the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from panoramia_fl.contracts.errors import UserError
from panoramia_fl.ml.datasets import DataError, load_dataset
from panoramia_fl.ml.partition import PartitionConfig, partition
from panoramia_fl.simulations.cli import main as cli_main

pytestmark = pytest.mark.ray

CLASSES = ("benign", "malignant", "normal")


def _pixels(rng: np.random.Generator, label: int, shape: tuple[int, ...]) -> np.ndarray:
    # A class-dependent brightness, so a model has something to learn.
    base = 40 + 80 * label
    return np.clip(base + rng.normal(0, 25, shape), 0, 255).astype(np.uint8)


def write_image_folder(
    root: Path,
    *,
    per_class: int = 4,
    size: tuple[int, int] = (10, 10),
    rgb: bool = False,
    suffix: str = ".png",
    seed: int = 0,
) -> dict[str, list[np.ndarray]]:
    """``root/<class>/<i>.png``; returns the pixels written per class (PNG is lossless)."""
    rng = np.random.default_rng(seed)
    written: dict[str, list[np.ndarray]] = {}
    for label, cls in enumerate(CLASSES):
        (root / cls).mkdir(parents=True, exist_ok=True)
        written[cls] = []
        for i in range(per_class):
            pixels = _pixels(rng, label, (*size, 3) if rgb else size)
            Image.fromarray(pixels).save(root / cls / f"{i:04d}{suffix}")
            written[cls].append(pixels)
    return written


def write_npz(path: Path, *, n=(30, 10, 12), size=(10, 10), rgb=False, drop=(), seed=0) -> dict:
    rng = np.random.default_rng(seed)
    arrays = {}
    for split, count in zip(("train", "val", "test"), n, strict=True):
        labels = rng.integers(0, 3, (count, 1))
        shape = (*size, 3) if rgb else size
        arrays[f"{split}_images"] = np.stack([_pixels(rng, int(c), shape) for c in labels[:, 0]])
        arrays[f"{split}_labels"] = labels
    for key in drop:
        del arrays[key]
    np.savez(path, **arrays)
    return arrays


# -- image_folder --------------------------------------------------------------------------


def test_image_folder_round_trip_with_public_split(tmp_path):
    written = write_image_folder(tmp_path, per_class=10)
    ds = load_dataset("image_folder", root=tmp_path, options={"public_fraction": 0.2})
    assert ds.input_shape == (1, 10, 10) and ds.num_classes == 3
    assert ds.info["classes"] == sorted(CLASSES)
    assert len(ds) == 24 and len(ds.public_x) == 6 and ds.sites is None
    # Every written image comes back once, in the pool or the public split, with its label.
    got = {(int(y), x.tobytes()) for x, y in zip(ds.x, ds.y, strict=True)}
    got |= {(int(y), x.tobytes()) for x, y in zip(ds.public_x, ds.public_y, strict=True)}
    want = {
        (sorted(CLASSES).index(c), px[None].tobytes()) for c, pxs in written.items() for px in pxs
    }
    assert got == want
    # The public split is fixed by the folder, not by the run.
    again = load_dataset("image_folder", root=tmp_path, options={"public_fraction": 0.2})
    assert np.array_equal(again.public_x, ds.public_x)


def test_image_folder_rgb_jpeg_grayscale_and_resize(tmp_path):
    write_image_folder(tmp_path, rgb=True, suffix=".jpg", size=(12, 9))
    rgb = load_dataset("image_folder", root=tmp_path)
    assert rgb.input_shape == (3, 12, 9) and rgb.x.dtype == np.uint8
    grey = load_dataset("image_folder", root=tmp_path, options={"grayscale": True, "resize": 8})
    assert grey.input_shape == (1, 8, 8) and grey.x.shape[1:] == (1, 8, 8)
    tall = load_dataset("image_folder", root=tmp_path, options={"resize": [16, 6]})
    assert tall.input_shape == (3, 16, 6)


def test_image_folder_natural_sites(tmp_path):
    for i, site in enumerate(("hospital_a", "hospital_b", "hospital_c")):
        write_image_folder(tmp_path / site, per_class=5 + i, seed=i)
    ds = load_dataset("image_folder", root=tmp_path, options={"public_fraction": 0.1})
    assert ds.info["site_names"] == ["hospital_a", "hospital_b", "hospital_c"]
    assert ds.sites is not None and len(ds.sites) == len(ds)
    assert len(ds) + len(ds.public_x) == 3 * (5 + 6 + 7)
    cfg = PartitionConfig(
        scheme="natural", num_sites=3, holdout_fraction=0.2, test_fraction=0.1, min_train=5
    )
    splits = partition(ds, cfg, seed=0)
    for split, site in zip(splits, range(3), strict=True):
        records = np.concatenate([split.train, split.holdout, split.test])
        assert set(ds.sites[records]) == {site}
        assert len(records) == int((ds.sites == site).sum())


def test_image_folder_named_errors(tmp_path):
    with pytest.raises(DataError, match=r"data\.root: image folder .*missing.* does not exist"):
        load_dataset("image_folder", root=tmp_path / "missing")
    with pytest.raises(DataError, match="data.root: set it"):
        load_dataset("image_folder")
    write_image_folder(tmp_path / "a")
    (tmp_path / "a" / "empty_class").mkdir()
    with pytest.raises(DataError, match=r"empty class folder\(s\) \['empty_class'\]"):
        load_dataset("image_folder", root=tmp_path / "a")
    write_image_folder(tmp_path / "b")
    Image.fromarray(np.zeros((7, 10), np.uint8)).save(tmp_path / "b" / "normal" / "odd.png")
    with pytest.raises(DataError, match=r"differ in size: .*10x10.*7x10.*data\.options\.resize"):
        load_dataset("image_folder", root=tmp_path / "b")
    assert load_dataset("image_folder", root=tmp_path / "b", options={"resize": 10}).input_shape
    (tmp_path / "c" / "x").mkdir(parents=True)
    (tmp_path / "c" / "x" / "broken.png").write_bytes(b"not a png")
    with pytest.raises(DataError, match=r"corrupt image file .*broken\.png"):
        load_dataset("image_folder", root=tmp_path / "c")
    with pytest.raises(DataError, match=r"data\.options\.public_fraction"):
        load_dataset("image_folder", root=tmp_path / "b", options={"public_fraction": 1.0})
    with pytest.raises(DataError, match=r"data\.options\.resise"):
        load_dataset("image_folder", root=tmp_path / "b", options={"resise": 8})


def test_image_folder_refuses_mixed_layouts(tmp_path):
    write_image_folder(tmp_path / "site_a")
    write_image_folder(tmp_path, per_class=1)  # class folders beside the site folder
    with pytest.raises(DataError, match="mixes site folders"):
        load_dataset("image_folder", root=tmp_path)


# -- npz -----------------------------------------------------------------------------------


@pytest.mark.parametrize("rgb", [False, True])
def test_npz_medmnist_layout(tmp_path, rgb):
    arrays = write_npz(tmp_path / "pathmnist.npz", rgb=rgb)
    ds = load_dataset("npz", root=tmp_path)  # a folder with one .npz
    channels = 3 if rgb else 1
    assert ds.input_shape == (channels, 10, 10) and len(ds) == 40
    pool = np.concatenate([arrays["train_images"], arrays["val_images"]])
    assert np.array_equal(ds.x, pool.transpose(0, 3, 1, 2) if rgb else pool[:, None])
    assert np.array_equal(ds.public_y, arrays["test_labels"][:, 0])
    assert ds.num_classes == 3
    only_train = load_dataset(
        "npz", root=tmp_path / "pathmnist.npz", options={"include_val": False, "grayscale": True}
    )
    assert len(only_train) == 30 and only_train.input_shape == (1, 10, 10)


def test_npz_named_errors(tmp_path):
    with pytest.raises(DataError, match=r"NPZ file .*nope\.npz does not exist"):
        load_dataset("npz", root=tmp_path / "nope.npz")
    write_npz(tmp_path / "a.npz", drop=("val_images", "test_labels"))
    with pytest.raises(DataError, match=r"missing array\(s\) \['test_labels', 'val_images'\]"):
        load_dataset("npz", root=tmp_path / "a.npz")
    np.savez(tmp_path / "multi.npz", **{
        f"{s}_{k}": v
        for s in ("train", "val", "test")
        for k, v in (("images", np.zeros((4, 8, 8), np.uint8)), ("labels", np.zeros((4, 14))))
    })  # fmt: skip
    with pytest.raises(DataError, match="multi-label"):
        load_dataset("npz", root=tmp_path / "multi.npz")
    with pytest.raises(DataError, match=r"holds 2 \.npz files"):
        load_dataset("npz", root=tmp_path)


def test_sixteen_bit_png_is_scaled_not_clipped(tmp_path):
    """PIL's own conversion clips 16-bit grey at 255 (nearly every pixel white); the loader
    scales by 255 / 65535."""
    wide = (np.arange(100, dtype=np.uint32).reshape(10, 10) * 650).astype(np.uint16)
    for cls in ("a", "b"):
        (tmp_path / cls).mkdir()
        Image.fromarray(wide).save(tmp_path / cls / "x.png")
    assert Image.open(tmp_path / "a" / "x.png").mode == "I;16"
    ds = load_dataset("image_folder", root=tmp_path, options={"public_fraction": 0})
    want = np.rint(wide * (255 / 65535)).astype(np.uint8)
    assert ds.x.dtype == np.uint8 and ds.x.shape == (2, 1, 10, 10)
    np.testing.assert_array_equal(ds.x[0, 0], want)
    assert (ds.x == 255).mean() < 0.05


def test_symlinks_out_of_the_folder_or_dangling_are_refused_by_name(tmp_path):
    root = tmp_path / "images"
    write_image_folder(root)
    outside = tmp_path / "elsewhere.png"
    Image.fromarray(np.zeros((10, 10), np.uint8)).save(outside)
    inside = root / CLASSES[0] / "inside.png"
    inside.symlink_to(root / CLASSES[1] / "0000.png")  # within the folder: fine
    assert len(load_dataset("image_folder", root=root, options={"public_fraction": 0})) == 13
    link = root / CLASSES[0] / "link.png"
    link.symlink_to(outside)
    with pytest.raises(DataError, match=r"link\.png: a symlink out of data\.root"):
        load_dataset("image_folder", root=root)
    link.unlink()
    dangling = root / CLASSES[1] / "gone.png"
    dangling.symlink_to(tmp_path / "missing.png")
    with pytest.raises(DataError, match=r"gone\.png: a dangling symlink"):
        load_dataset("image_folder", root=root)


def test_one_class_makes_no_task(tmp_path):
    write_image_folder(tmp_path)
    for cls in CLASSES[1:]:
        for f in (tmp_path / cls).iterdir():
            f.unlink()
        (tmp_path / cls).rmdir()
    with pytest.raises(DataError, match="1 class; a classifier needs at least two"):
        load_dataset("image_folder", root=tmp_path)


def _forge_png_size(src: Path, dst: Path, width: int, height: int) -> None:
    """``src`` with its IHDR claiming ``width`` x ``height`` (CRC fixed): a huge image's
    header on a file of a few bytes."""
    import struct
    import zlib

    raw = bytearray(src.read_bytes())
    raw[16:24] = struct.pack(">II", width, height)
    raw[29:33] = struct.pack(">I", zlib.crc32(bytes(raw[12:29])))
    dst.write_bytes(bytes(raw))


@pytest.mark.parametrize("side", [5000, 20000])
def test_huge_image_refused_before_decoding_naming_the_file(tmp_path, side):
    write_image_folder(tmp_path)
    src = tmp_path / CLASSES[0] / "0000.png"
    _forge_png_size(src, tmp_path / CLASSES[0] / "huge.png", side, side)
    with pytest.raises(DataError, match=r"huge\.png: .*pixels.*refused before decoding"):
        load_dataset("image_folder", root=tmp_path)


def test_npz_stray_label_refused_and_declared_range(tmp_path):
    arrays = write_npz(tmp_path / "a.npz")
    arrays["train_labels"][0, 0] = 10**7
    np.savez(tmp_path / "a.npz", **arrays)
    with pytest.raises(DataError, match=r"labels run to 10000000 but only 4 distinct"):
        load_dataset("npz", root=tmp_path / "a.npz")
    with pytest.raises(DataError, match=r"label 10000000, outside the 5 classes 0\.\.4"):
        load_dataset("npz", root=tmp_path / "a.npz", options={"num_classes": 5})
    arrays["train_labels"][0, 0] = 4  # classes 0-2 and 4 seen: 5 declared is fine
    np.savez(tmp_path / "a.npz", **arrays)
    assert load_dataset("npz", root=tmp_path / "a.npz", options={"num_classes": 5}).num_classes == 5


def test_npz_damaged_or_expanding_is_named_before_decoding(tmp_path):
    import tracemalloc
    import zipfile

    write_npz(tmp_path / "a.npz")
    raw = (tmp_path / "a.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(UserError, match=r"corrupt NPZ file .*cut\.npz"):
        load_dataset("npz", root=tmp_path / "cut.npz")
    # 32 MB of zeros in a few kB, beside labels for 5 images: the lengths disagree.
    n = 32 * 2**20 // 100
    with zipfile.ZipFile(tmp_path / "bomb.npz", "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for split in ("train", "val", "test"):
            with zf.open(f"{split}_images.npy", "w") as fh:
                shape = (n if split == "train" else 5, 10, 10)
                header = {"descr": "|u1", "fortran_order": False, "shape": shape}
                np.lib.format.write_array_header_1_0(fh, header)
                for _ in range(32 if split == "train" else 0):
                    fh.write(bytes(2**20))
                fh.write(bytes(500 if split != "train" else 0))
            with zf.open(f"{split}_labels.npy", "w") as fh:
                np.lib.format.write_array(fh, np.zeros(5, np.int64))
    tracemalloc.start()
    try:
        with pytest.raises(DataError, match=r"train_images \(335544, 10, 10\) and train_labels"):
            load_dataset("npz", root=tmp_path / "bomb.npz")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, f"{peak / 2**20:.0f} MiB read before the check"


# -- real federated runs through the CLI ---------------------------------------------------

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
SHORT = [  # configs/image_folder.yaml cut to one quick round and a tiny audit
    "fl.rounds=1",
    "fl.local_epochs=1",
    "audit.settings.repeats=1",
    "audit.settings.helper_epochs=1",
    "audit.settings.splits.generator=30",
    "audit.settings.splits.train=30",
    "audit.settings.splits.val=15",
    "audit.settings.classifier.epochs=[1]",
    "audit.settings.calibration.reference_models=1",
    "audit.settings.calibration.epochs=1",
]


def _cli_run(tmp_path: Path, sets: list[str]) -> dict:
    argv = ["run", str(CONFIGS / "image_folder.yaml"), "--out", str(tmp_path / "out")]
    for kv in [*SHORT, *sets]:
        argv += ["--set", kv]
    assert cli_main(argv) == 0
    return json.loads((tmp_path / "out" / "report.json").read_text())


@pytest.mark.slow
def test_cli_run_on_an_image_folder_with_natural_sites(tmp_path):
    for i, site in enumerate(("hospital_a", "hospital_b")):
        write_image_folder(tmp_path / "images" / site, per_class=100, size=(12, 12), seed=i)
    report = _cli_run(
        tmp_path,
        [
            f"data.root={tmp_path / 'images'}",
            "data.options.resize=12",
            "data.options.grayscale=true",
            # The public split feeds the reference models and both sites' reference pools.
            "data.options.public_fraction=0.4",
            "partition.scheme=natural",
        ],
    )
    assert [s["status"] for s in report["sites"]] == ["ok", "ok"], report["sites"]
    assert all(s["audit"]["modality"] == "image" for s in report["sites"])
    partition = json.loads((tmp_path / "out" / "partition.json").read_text())
    # Natural sites: between them they hold every record but the public 40% (240 of 600).
    sizes = [s["train"] + s["holdout"] + s["test"] for s in partition["sites"]]
    assert sum(sizes) == 360 and min(sizes) > 0


@pytest.mark.slow
def test_cli_run_on_an_npz_file(tmp_path):
    write_npz(tmp_path / "bloodmnist.npz", n=(400, 40, 300), size=(12, 12), rgb=True)
    report = _cli_run(
        tmp_path,
        [
            "data.name=npz",
            f"data.root={tmp_path / 'bloodmnist.npz'}",
            "data.options={}",
            # The run's reading of an npz file is checked here; calibration, by the run above.
            "audit.settings.calibration.reference_models=0",
        ],
    )
    assert [s["status"] for s in report["sites"]] == ["ok", "ok"], report["sites"]
