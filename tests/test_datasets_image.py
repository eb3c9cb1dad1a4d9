"""The image loaders on small files written here in the real formats."""

import gzip
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from idx_files import make_idx_folder

from panoramia_fl.ml.datasets import DataError, load_dataset
from panoramia_fl.ml.datasets.image import _digits_table, read_idx


@pytest.mark.parametrize("compress", [True, False])
def test_idx_round_trip(tmp_path, compress):
    x, y, tx, ty = make_idx_folder(tmp_path, compress=compress)
    ds = load_dataset("fashion_mnist", root=tmp_path)
    assert ds.x.shape == (20, 1, 28, 28) and ds.x.dtype == np.uint8
    assert np.array_equal(ds.x[:, 0], x) and np.array_equal(ds.y, y)
    assert np.array_equal(ds.public_x[:, 0], tx) and np.array_equal(ds.public_y, ty)


def test_torchvision_raw_layout_and_limits(tmp_path):
    x, y, _, _ = make_idx_folder(tmp_path / "MNIST" / "raw", compress=False)
    ds = load_dataset("mnist", root=tmp_path, options={"max_train": 5})
    assert len(ds) == 5 and np.array_equal(ds.x[:, 0], x[:5])


def test_missing_file_names_path_and_remedy(tmp_path):
    with pytest.raises(DataError, match=r"missing data file: .*train-images-idx3-ubyte.*apt-get"):
        load_dataset("fashion_mnist", root=tmp_path)


def test_corrupt_files_are_named(tmp_path):
    make_idx_folder(tmp_path, compress=False)
    bad = tmp_path / "train-images-idx3-ubyte"
    bad.write_bytes(bad.read_bytes()[:-10])
    with pytest.raises(DataError, match="corrupt data file .*train-images-idx3-ubyte.*header says"):
        load_dataset("fashion_mnist", root=tmp_path)
    bad.write_bytes(b"\x01\x02\x03\x04garbage")
    with pytest.raises(DataError, match="bad magic"):
        read_idx(bad)
    packed = gzip.compress(bytes(range(256)) * 64)
    for broken in (packed[:-30], packed[:12] + bytes(200) + packed[212:], b"\x1f\x8bgarbage"):
        gz = tmp_path / "t10k-images-idx3-ubyte.gz"
        gz.write_bytes(broken)
        with pytest.raises(DataError, match="corrupt data file .*t10k-images-idx3-ubyte.gz"):
            read_idx(gz)


def test_bad_loader_option_names_key(tmp_path):
    with pytest.raises(ValueError, match=r"data\.options\.max_trian"):
        load_dataset("fashion_mnist", root=tmp_path, options={"max_trian": 3})


def write_cifar(folder, n_per_batch=6, seed=0):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    batches = []
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (n_per_batch, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, n_per_batch).tolist()
        with open(folder / name, "wb") as fh:
            pickle.dump({b"data": data, b"labels": labels}, fh)
        batches.append((data, labels))
    return batches


def test_cifar10_pickle_batches(tmp_path):
    batches = write_cifar(tmp_path / "cifar-10-batches-py")
    ds = load_dataset("cifar10", root=tmp_path)
    assert ds.x.shape == (30, 3, 32, 32) and ds.input_shape == (3, 32, 32)
    assert np.array_equal(ds.x[0].reshape(-1), batches[0][0][0])
    assert ds.public_x.shape == (6, 3, 32, 32)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(DataError, match="corrupt data file .*data_batch_3"):
        load_dataset("cifar10", root=tmp_path)


class _Payload:
    """What a hostile batch would hold: unpickling it calls ``Path.touch(marker)``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_cifar_batches_are_unpickled_with_numpy_arrays_only(tmp_path, protocol):
    folder = tmp_path / "cifar-10-batches-py"
    batches = write_cifar(folder)
    real = {  # the real files' keys, at a protocol that pickles bytes through _codecs
        b"batch_label": "training batch 1 of 5",
        b"data": batches[0][0],
        b"labels": batches[0][1],
        b"filenames": [f"img_{i}.png" for i in range(6)],
    }
    (folder / "data_batch_1").write_bytes(pickle.dumps(real, protocol=protocol))
    assert np.array_equal(load_dataset("cifar10", root=tmp_path).x[0].reshape(-1), real[b"data"][0])
    marker = tmp_path / "ran"
    hostile = {b"data": batches[1][0], b"labels": batches[1][1], b"x": _Payload(marker)}
    (folder / "data_batch_2").write_bytes(pickle.dumps(hostile, protocol=protocol))
    with pytest.raises(DataError, match=r"data_batch_2.*which a CIFAR batch never does"):
        load_dataset("cifar10", root=tmp_path)
    assert not marker.exists()


def test_digits_is_always_there():
    ds = load_dataset("digits")
    assert ds.input_shape == (1, 8, 8) and len(ds) + len(ds.public_x) == 1797


def test_digits_are_scikit_learns_without_importing_it():
    from sklearn.datasets import load_digits

    bunch = load_digits()
    assert np.array_equal(_digits_table(), np.column_stack([bunch.data, bunch.target]))
    # A site process that only trains on digits never pays for importing scikit-learn.
    probe = "import sys; from panoramia_fl.ml.datasets import load_dataset; "
    probe += "load_dataset('digits'); sys.exit('sklearn' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0
