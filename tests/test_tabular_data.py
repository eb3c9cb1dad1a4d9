"""Tabular loaders (randhie, csv), the MLP and the tabular task."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from panoramia_fl.audit.tabular.attributes import rare_value_mask
from panoramia_fl.contracts.tabular_schema import attributes_from_schema, infer_attributes
from panoramia_fl.ml.datasets import DataError, load_dataset, parse_options
from panoramia_fl.ml.models import MODELS
from panoramia_fl.ml.tasks import build_task


@pytest.fixture(autouse=True)
def one_thread():
    # The suite shares 2 cores with other jobs: more torch threads only add contention.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def write_csv(path: Path, n: int = 120, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    lines = ["age,city,income,visits,hospital,label"]
    for i in range(n):
        age = rng.integers(18, 90)
        city = ["lyon", "nice", "paris"][i % 3]
        income = "" if i == 5 else f"{rng.normal(30000, 8000):.1f}"
        label = "yes" if rng.random() < 0.4 + 0.004 * (age - 18) else "no"
        lines.append(f"{age},{city},{income},{rng.poisson(2)},H{i % 4},{label}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_csv_loader_encodes_numeric_and_categorical(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "patients.csv")
    ds = load_dataset(
        "csv",
        options={
            "path": str(path),
            "target": "label",
            "categorical": ["city"],
            "site_column": "hospital",
            "public_fraction": 0.25,
        },
    )
    assert ds.modality == "tabular" and ds.num_classes == 2
    assert len(ds) + len(ds.public_x) == 120 and len(ds.public_x) == 30
    # age, city (3 one-hot), income, visits
    assert ds.input_shape == (6,) and ds.x.dtype == np.float32 and ds.y.dtype == np.int64
    schema = ds.info["schema"]
    assert [c["name"] for c in schema["columns"]] == ["age", "city", "income", "visits"]
    assert schema["classes"] == ["no", "yes"]
    city = schema["columns"][1]
    assert city["levels"] == ["lyon", "nice", "paris"]
    assert np.array_equal(ds.x[:, 1:4].sum(axis=1), np.ones(len(ds)))
    # Standardised on the pool; the missing income is imputed, not NaN.
    assert np.isfinite(ds.x).all() and abs(float(ds.x[:, 0].mean())) < 1e-5
    assert set(np.unique(ds.sites)) <= {0, 1, 2, 3}
    # The encoding is self-describing: the generator finds the same attributes.
    inferred = infer_attributes(ds.x)
    assert [(a.start, a.width) for a in inferred] == [
        (c["start"], c["width"]) for c in schema["columns"]
    ]


def test_csv_loader_relative_path_under_root(tmp_path: Path) -> None:
    write_csv(tmp_path / "t.csv")
    ds = load_dataset(
        "csv",
        root=tmp_path,
        options={"path": "t.csv", "target": "label", "categorical": ["city"], "drop": ["hospital"]},
    )
    assert ds.input_shape == (6,) and ds.sites is None


def test_csv_loader_errors_name_file_and_column(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "p.csv")
    with pytest.raises(DataError, match="missing data file: .*nothere.csv"):
        load_dataset("csv", options={"path": str(tmp_path / "nothere.csv"), "target": "label"})
    with pytest.raises(DataError, match=r"p\.csv: column 'outcome' \(data.options.target\)"):
        load_dataset(
            "csv", options={"path": str(path), "target": "outcome", "categorical": ["city"]}
        )
    with pytest.raises(DataError, match=r"column 'ward' \(data.options.categorical\)"):
        load_dataset("csv", options={"path": str(path), "target": "label", "categorical": ["ward"]})
    with pytest.raises(DataError, match=r"p\.csv: column 'city' is not numeric .*'lyon'"):
        load_dataset("csv", options={"path": str(path), "target": "label", "drop": ["hospital"]})
    with pytest.raises(ValueError, match="data.options.target"):
        parse_options("csv", {"path": str(path)})
    (tmp_path / "bad.csv").write_text('a,b\n1,2\n3\n"x,4\n')
    with pytest.raises(DataError, match="bad.csv"):
        load_dataset("csv", options={"path": str(tmp_path / "bad.csv"), "target": "b"})


def test_csv_infinite_cells_are_refused_by_column(tmp_path: Path) -> None:
    """Two inf cells would make the column NaN after scaling: every site's update is then
    non-finite and rejected, and the run trains nothing."""
    path = write_csv(tmp_path / "p.csv")
    lines = path.read_text().splitlines()
    for row, value in ((3, "inf"), (9, "-inf")):
        cells = lines[row].split(",")
        cells[2] = value
        lines[row] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    options = {"path": str(path), "target": "label", "categorical": ["city", "hospital"]}
    with pytest.raises(DataError, match=r"p\.csv: column 'income' has 2 infinite value\(s\)"):
        load_dataset("csv", options=options)


def test_randhie_loader() -> None:
    ds = load_dataset("randhie", options={"unit": "person_year"})
    assert ds.name == "randhie" and ds.modality == "tabular" and ds.num_classes == 2
    assert len(ds) + len(ds.public_y) == 20190
    assert 0.17 < len(ds.public_y) / 20190 < 0.23
    # Persons never straddle the public split; sites are the six experiment cities.
    assert set(np.unique(ds.sites)) == {1, 2, 3, 4, 5, 6} and ds.groups is not None
    assert 0.45 < ds.y.mean() < 0.55  # high_spending is split at the median
    schema = ds.info["schema"]
    assert ds.input_shape == (schema["encoded_width"],)
    assert [c["name"] for c in schema["columns"][:2]] == ["plan", "health"]
    assert schema["columns"][1]["levels"] == ["excellent", "fair", "good", "poor"]
    # Some pool rows, not most, hold a rare or extreme value (the audit's generator reports
    # their share in D_G, paper Appendix D.6).
    rare = rare_value_mask(ds.x, attributes_from_schema(schema, ds.x.shape[1])).any(axis=1)
    assert 0 < rare.mean() < 0.5
    assert [(a.start, a.width) for a in infer_attributes(ds.x)] == [
        (c["start"], c["width"]) for c in schema["columns"]
    ]
    person = load_dataset("randhie", options={"target": "any_admission"})  # unit: person
    assert len(person) + len(person.public_y) == 5912
    assert len(np.unique(person.groups)) == len(person)
    assert 0.05 < person.y.mean() < 0.15  # about 9% of person-years have an admission
    with pytest.raises(ValueError, match="data.options.target"):
        parse_options("randhie", {"target": "cost"})


def test_mlp_and_task_train_on_encoded_rows() -> None:
    torch.manual_seed(0)
    assert MODELS.meta("mlp")["modality"] == "tabular"
    model = MODELS.get("mlp")(num_classes=3, dp=True, input_shape=(7,))
    widths = [m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert widths == [150, 100, 50, 10, 3]
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 5)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64)
    task = build_task("tabular", model_name="mlp", num_classes=2, input_shape=(5,))
    model = task.make_model()
    before = task.evaluate(model, x, y, device=torch.device("cpu"))
    task.train_model(model, x, y, epochs=15, seed=0, device=torch.device("cpu"))
    after = task.evaluate(model, x, y, device=torch.device("cpu"))
    assert after["loss"] < before["loss"] and after["accuracy"] > 0.9
    feats = task.loss_features(model, x[:10], y[:10], device=torch.device("cpu"))
    assert feats.shape == (10, 3)
    assert np.allclose(
        feats[:, 0],
        task.per_record_loss(model, x[:10], y[:10], device=torch.device("cpu")),
        atol=1e-6,
    )
    with pytest.raises(ValueError, match="flat records"):
        MODELS.get("mlp")(num_classes=2, dp=False, input_shape=(1, 5))
