"""A site's own images: a folder of class sub-folders, or a MedMNIST-style NPZ file.

- ``image_folder``: ``root/<class>/*.png|jpg|jpeg``, or ``root/<site>/<class>/...`` where each
  top folder is one site (``partition.scheme: natural``). Class names are the sub-folder
  names, sorted (label ``i`` is the ``i``-th name over all sites). A fixed, seeded fraction of
  the records (``public_fraction``) is kept out of every site: the public split that central
  evaluation, the reference pool and the reference models draw on.
- ``npz``: MedMNIST's layout, ``{train,val,test}_{images,labels}``, images ``(n, H, W)``
  (grey) or ``(n, H, W, 3)`` (RGB), labels ``(n,)`` or ``(n, 1)``. ``train`` (and ``val``)
  form the pool; ``test`` is the public split.

Records are uint8 arrays of shape ``(n, C, H, W)``, as for the other image loaders.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import Field

from panoramia_fl.ml.datasets import DATASETS, DataError, Dataset, LoaderOptions
from panoramia_fl.ml.npz import NpzArray, npz_headers, read_npz

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
PUBLIC_SPLIT_SEED = 12345
"""Seeds the public split of ``image_folder``: the same folder gives the same split in every
run, whatever the experiment's seed (as for ``digits``)."""

Side = Annotated[int, Field(ge=4, le=1024)]

MAX_IMAGE_PIXELS = 4096 * 4096
"""The most pixels an image file may have: its header is checked before any decoding (a
huge or forged image would otherwise fill the memory)."""
SIXTEEN_BIT_MODES = frozenset({"I;16", "I;16B", "I;16L", "I;16N"})
"""PIL's modes of 16-bit grey images (PNG, TIFF): scaled to 8 bits, not clipped."""


class ImageFolderOptions(LoaderOptions):
    resize: Side | tuple[Side, Side] | None = Field(
        None, description="side, or [height, width]: every image resized to it (bilinear)"
    )
    grayscale: bool = Field(False, description="convert every image to one grey channel")
    public_fraction: float = Field(
        0.2, ge=0, lt=1, description="records kept out of every site as the public split"
    )


def _entries(folder: Path, root: Path) -> list[Path]:
    """``folder``'s entries; a symlink must lead to something inside ``root`` (a dangling
    one, or one out of the folder, is refused by name rather than skipped or followed)."""
    entries = []
    for path in folder.iterdir():
        if path.is_symlink():
            target = path.resolve()
            if not target.exists():
                raise DataError(f"{path}: a dangling symlink (to {target}); remove or fix it")
            if not target.is_relative_to(root.resolve()):
                raise DataError(
                    f"{path}: a symlink out of data.root {root} (to {target}); links out of "
                    "the folder are refused"
                )
        entries.append(path)
    return entries


def _images_in(folder: Path, root: Path) -> list[Path]:
    return sorted(
        p for p in _entries(folder, root) if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
    )


def _subfolders(folder: Path, root: Path) -> list[Path]:
    return sorted(p for p in _entries(folder, root) if p.is_dir() and not p.name.startswith("."))


def _class_folders(folder: Path, root: Path) -> dict[str, list[Path]]:
    """Class name -> its image files, for one ``<class>/*.png`` folder; empty classes refused."""
    classes = _subfolders(folder, root)
    if not classes:
        raise DataError(
            f"{folder}: no class sub-folders; expected {folder}/<class>/*.png|jpg "
            f"(or {folder}/<site>/<class>/... for natural sites)"
        )
    files = {c.name: _images_in(c, root) for c in classes}
    empty = [name for name, paths in files.items() if not paths]
    if empty:
        raise DataError(
            f"{folder}: empty class folder(s) {empty}: no {'/'.join(IMAGE_SUFFIXES)} files"
        )
    return files


def scan_image_folder(root: Path) -> dict[str | None, dict[str, list[Path]]]:
    """The folder's layout: site name (``None`` when there are no sites) -> class -> files.

    A folder whose sub-folders hold images is a class folder; one whose sub-folders hold only
    sub-folders is a folder of sites.
    """
    if not root.is_dir():
        raise DataError(f"data.root: image folder {root} does not exist (or is not a folder)")
    tops = _subfolders(root, root)
    if not tops:
        raise DataError(f"data.root: {root} has no sub-folders; expected {root}/<class>/*.png")
    # Sites when the first level holds folders and no images at all.
    nested = [t for t in tops if _subfolders(t, root) and not _images_in(t, root)]
    if not nested:
        return {None: _class_folders(root, root)}
    if len(nested) != len(tops):
        flat = sorted(t.name for t in tops if t not in nested)
        raise DataError(
            f"{root}: mixes site folders ({[t.name for t in nested]}) with class folders "
            f"holding images directly ({flat}); use one layout"
        )
    return {t.name: _class_folders(t, root) for t in tops}


def _open_image(path: Path) -> Any:
    """``path`` opened (its header read, nothing decoded); too many pixels refused first."""
    from PIL import Image, UnidentifiedImageError

    try:
        img = Image.open(path)
    except Image.DecompressionBombError as err:  # PIL's own, far larger limit
        raise DataError(f"image file {path}: {err} (refused before decoding)") from None
    except (OSError, UnidentifiedImageError) as err:
        raise DataError(f"corrupt image file {path}: {err}") from None
    width, height = img.size
    if width * height > MAX_IMAGE_PIXELS:
        img.close()
        raise DataError(
            f"image file {path}: {width}x{height} pixels, more than {MAX_IMAGE_PIXELS:,} "
            "(refused before decoding: shrink the images first)"
        )
    return img


def _to_8bit(img: Any) -> Any:
    """A 16-bit grey image scaled to 8 bits (``v * 255 / 65535``, rounded); PIL's own
    conversion clips at 255 instead, which whitens almost every pixel."""
    from PIL import Image

    if img.mode not in SIXTEEN_BIT_MODES:
        return img
    wide = np.asarray(img, dtype=np.float64)
    return Image.fromarray(np.rint(wide * (255 / 65535)).clip(0, 255).astype(np.uint8), "L")


def _read_image(path: Path, mode: str, size: tuple[int, int] | None) -> np.ndarray:
    """One image as uint8 ``(C, H, W)`` in ``mode`` (``"L"`` or ``"RGB"``), resized if asked."""
    from PIL import Image

    with _open_image(path) as opened:
        try:
            img = _to_8bit(opened).convert(mode)
            if size is not None and img.size != (size[1], size[0]):
                img = img.resize((size[1], size[0]), Image.Resampling.BILINEAR)
            array = np.asarray(img, dtype=np.uint8)
        except (OSError, ValueError) as err:
            raise DataError(f"corrupt image file {path}: {err}") from None
    return array[None] if array.ndim == 2 else array.transpose(2, 0, 1)


def _colour_mode(paths: list[Path], grayscale: bool) -> str:
    """``"L"`` when asked or when every image is grey already; ``"RGB"`` otherwise."""
    grey = {"1", "L", "LA", "I", "F", *SIXTEEN_BIT_MODES}
    colour = False
    for path in paths:
        with _open_image(path) as img:  # reads the header only: sizes checked up front
            colour = colour or img.mode not in grey
    return "RGB" if colour and not grayscale else "L"


def _stack(arrays: list[np.ndarray], paths: list[Path]) -> np.ndarray:
    shapes: dict[tuple[int, ...], Path] = {}
    for array, path in zip(arrays, paths, strict=True):
        shapes.setdefault(array.shape[1:], path)
    if len(shapes) > 1:
        examples = ", ".join(f"{h}x{w} ({p})" for (h, w), p in list(shapes.items())[:3])
        raise DataError(
            f"image folder: images differ in size: {examples}; set data.options.resize "
            "(e.g. resize: 64) to bring them to one size"
        )
    return np.stack(arrays)


def _public_mask(n: int, fraction: float) -> np.ndarray:
    order = np.random.default_rng(PUBLIC_SPLIT_SEED).permutation(n)
    mask = np.zeros(n, dtype=bool)
    mask[order[: int(round(fraction * n))]] = True
    return mask


@DATASETS.register("image_folder", options=ImageFolderOptions)
def image_folder(root: Path | None, options: ImageFolderOptions) -> Dataset:
    """Images from ``root/<class>/`` or ``root/<site>/<class>/`` (see the module's notes)."""
    if root is None:
        raise DataError("data.root: set it to the image folder (root/<class>/*.png)")
    layout = scan_image_folder(root)
    classes = sorted({c for per_site in layout.values() for c in per_site})
    label_of = {c: i for i, c in enumerate(classes)}
    site_names = [s for s in layout if s is not None]
    paths: list[Path] = []
    labels: list[int] = []
    sites: list[int] = []
    for site_index, per_site in enumerate(layout.values()):
        for cls, files in per_site.items():
            paths += files
            labels += [label_of[cls]] * len(files)
            sites += [site_index] * len(files)
    size = (options.resize, options.resize) if isinstance(options.resize, int) else options.resize
    mode = _colour_mode(paths, options.grayscale)
    x = _stack([_read_image(p, mode, size) for p in paths], paths)
    y = np.asarray(labels, dtype=np.int64)
    public = _public_mask(len(x), options.public_fraction)
    return Dataset(
        name="image_folder",
        modality="image",
        x=x[~public],
        y=y[~public],
        num_classes=len(classes),
        input_shape=tuple(int(d) for d in x.shape[1:]),
        public_x=x[public] if public.any() else None,
        public_y=y[public] if public.any() else None,
        sites=np.asarray(sites, dtype=np.int64)[~public] if site_names else None,
        info={"source": str(root), "classes": classes, "site_names": site_names},
    )


# -- NPZ (MedMNIST layout) -----------------------------------------------------------------

NPZ_SPLITS = ("train", "val", "test")


class NpzOptions(LoaderOptions):
    include_val: bool = Field(True, description="add the val split to the pool sites draw from")
    grayscale: bool = Field(False, description="convert RGB images to one grey channel")
    max_train: int | None = Field(None, ge=1, description="use the first N pool images")
    max_test: int | None = Field(None, ge=1, description="use the first N public images")
    num_classes: int | None = Field(
        None,
        ge=2,
        description="the labels' range 0..N-1 (default: the labels seen, which must then be "
        "0..K-1 with none missing)",
    )


def _npz_file(root: Path) -> Path:
    if root.is_file():
        return root
    if root.is_dir():
        found = sorted(root.glob("*.npz"))
        if len(found) == 1:
            return found[0]
        if found:
            raise DataError(
                f"data.root: {root} holds {len(found)} .npz files "
                f"({[p.name for p in found]}); point data.root at one of them"
            )
    raise DataError(f"data.root: NPZ file {root} does not exist (nor a folder with one .npz)")


def _npz_split(arrays: dict[str, np.ndarray], split: str, path: Path) -> tuple[np.ndarray, ...]:
    images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
    if images.ndim == 3:
        images = images[:, None]
    elif images.ndim == 4 and images.shape[-1] in (1, 3):
        images = images.transpose(0, 3, 1, 2)
    else:
        raise DataError(
            f"{path}: {split}_images has shape {images.shape}; expected (n, H, W) or (n, H, W, 3)"
        )
    if images.dtype != np.uint8:
        raise DataError(f"{path}: {split}_images is {images.dtype}; expected uint8 pixels")
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1:
        raise DataError(
            f"{path}: {split}_labels has shape {labels.shape}; one class per image is "
            "expected (multi-label tasks are not supported)"
        )
    if len(labels) != len(images):
        raise DataError(f"{path}: {split}_images and {split}_labels disagree in length")
    if len(labels) and (labels.min() < 0 or not np.issubdtype(labels.dtype, np.integer)):
        raise DataError(f"{path}: {split}_labels must be non-negative integers")
    return images, labels.astype(np.int64)


def _check_npz_sizes(path: Path, headers: dict[str, NpzArray]) -> None:
    """Each split's images and labels agree in length, by the headers: checked before
    anything is decompressed."""
    for split in NPZ_SPLITS:
        images, labels = headers.get(f"{split}_images"), headers.get(f"{split}_labels")
        if images is None or labels is None:
            continue
        if not images.shape or not labels.shape or images.shape[0] != labels.shape[0]:
            raise DataError(
                f"{path}: {split}_images {images.shape} and {split}_labels {labels.shape} "
                "disagree in length"
            )


def _npz_classes(path: Path, labels: np.ndarray, declared: int | None) -> int:
    """The number of classes: ``declared`` (labels beyond it are refused by
    :func:`ml.datasets.check_labels`), else the labels seen, which must be 0..K-1 with
    none missing: one stray label (10**7 among 0..9) would otherwise make K = 10**7 + 1."""
    if declared is not None:
        return declared
    seen = np.unique(labels)
    count = int(seen[-1]) + 1 if len(seen) else 0
    if len(seen) != count:
        absent = sorted(set(range(min(count, len(seen) + 3))) - {int(v) for v in seen})
        raise DataError(
            f"{path}: the labels run to {count - 1} but only {len(seen)} distinct values "
            f"occur (e.g. no {absent[:3]}); a stray label? Fix it, or declare the classes "
            "with data.options.num_classes"
        )
    return count


def _to_grey(images: np.ndarray) -> np.ndarray:
    if images.shape[1] == 1:
        return images
    # ITU-R 601 luma, the weights PIL's convert("L") uses: grey from either loader agrees.
    weights = np.asarray([299, 587, 114], dtype=np.uint32)[None, :, None, None]
    return ((images.astype(np.uint32) * weights).sum(1, keepdims=True) // 1000).astype(np.uint8)


@DATASETS.register("npz", options=NpzOptions)
def npz(root: Path | None, options: NpzOptions) -> Dataset:
    """Images in MedMNIST's NPZ layout; the test split is the public split."""
    if root is None:
        raise DataError("data.root: set it to the .npz file (MedMNIST layout)")
    path = _npz_file(root)
    needed = ["train_images", "train_labels", "test_images", "test_labels"]
    if options.include_val:
        needed += ["val_images", "val_labels"]
    headers = npz_headers(path)
    _check_npz_sizes(path, {k: v for k, v in headers.items() if k in needed})
    arrays = read_npz(path, [k for k in needed if k in headers])
    missing = [k for k in needed if k not in arrays]
    if missing:
        raise DataError(
            f"{path}: missing array(s) {missing} (has {sorted(arrays)}); expected MedMNIST's "
            "train_images, train_labels, val_images, val_labels, test_images, test_labels"
            + ("" if "val_images" in arrays else " (or set data.options.include_val: false)")
        )
    pool = [_npz_split(arrays, "train", path)]
    if options.include_val:
        pool.append(_npz_split(arrays, "val", path))
    tx, ty = _npz_split(arrays, "test", path)
    x = np.concatenate([p[0] for p in pool])
    y = np.concatenate([p[1] for p in pool])
    if x.shape[1:] != tx.shape[1:]:
        raise DataError(f"{path}: train images are {x.shape[1:]}, test images {tx.shape[1:]}")
    if options.grayscale:
        x, tx = _to_grey(x), _to_grey(tx)
    x, y = x[: options.max_train], y[: options.max_train]
    tx, ty = tx[: options.max_test], ty[: options.max_test]
    return Dataset(
        name="npz",
        modality="image",
        x=x,
        y=y,
        num_classes=_npz_classes(path, np.concatenate([y, ty]), options.num_classes),
        input_shape=tuple(int(d) for d in x.shape[1:]),
        public_x=tx,
        public_y=ty,
        info={"source": str(path)},
    )
