"""The one checked decoder (``contracts.json_values.from_dict``): it reads what ``json_safe``
writes, checks every key's type with its path, and reads fields older files held flat."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Annotated, Any, Literal

import pytest

from panoramia_fl.contracts.json_values import (
    FLAT_IN_OLDER,
    INLINE,
    NullAs,
    from_dict,
    json_key,
    json_safe,
)

# --- the one checked decoder ------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Inner:
    x: float
    tag: Literal["a", "b"] = "a"


@dataclasses.dataclass(frozen=True)
class _Record:
    count: int
    share: float
    name: str
    on: bool
    low: Annotated[float, NullAs(-math.inf)]
    inner: _Inner
    pair: tuple[float, float | None]
    shape: tuple[int, ...]
    by_site: dict[str, _Inner]
    by_round: dict[int, float]
    inner_flat: _Inner = dataclasses.field(default=_Inner(0.0), metadata=INLINE)
    maybe: float | None = None
    items: list[_Inner] = dataclasses.field(default_factory=list)
    anything: Any = None


def test_the_decoder_reads_what_json_safe_writes_and_checks_every_key():
    record = _Record(
        count=3,
        share=0.5,
        name="n",
        on=True,
        low=-math.inf,
        inner=_Inner(1.5, "b"),
        pair=(1.0, None),
        shape=(1, 28, 28),
        by_site={"10": _Inner(1.0), "2": _Inner(2.0)},
        by_round={12: 0.5, 3: 0.25},
        inner_flat=_Inner(4.0, "b"),
        maybe=None,
        items=[_Inner(0.0)],
        anything={"k": [1, "x"]},
    )
    data = json.loads(json.dumps(json_safe(record)))
    assert data["low"] is None and data["x"] == 4.0 and "inner_flat" not in data  # inline
    back = from_dict(_Record, data)
    assert back == record
    assert list(back.by_site) == ["2", "10"] and list(back.by_round) == [3, 12]  # numeric order
    # A plain float's null is a non-finite number of unknown sign.
    assert math.isnan(from_dict(_Record, data | {"share": None}).share)
    for change, why in (
        ({"count": 2.5}, "'count' must be an integer, got 2.5"),
        ({"count": True}, "'count' must be an integer, got True"),
        ({"share": "0.5"}, "'share' must be a number, got '0.5'"),
        ({"share": float("inf")}, "'share' must be finite"),
        ({"name": 1}, "'name' must be a string, got 1"),
        ({"on": 1}, "'on' must be true or false, got 1"),
        ({"inner": {"x": 1.0, "tag": "c"}}, r"'inner\.tag' must be one of \['a', 'b'\]"),
        ({"pair": [1.0]}, "'pair' must be a list of 2, got 1"),
        ({"shape": [1, "28"]}, r"'shape\[1\]' must be an integer"),
        ({"by_site": {"2": {"x": "1"}}}, r"'by_site\.2\.x' must be a number"),
        ({"by_round": {"first": 0.5}}, "'by_round' must be keyed by numbers"),
        ({"items": [{"x": 0.0}, {}]}, r"'items\[1\]\.x' is missing"),
        ({"x": "4"}, "'x' must be a number, got '4'"),  # an inline field's key
    ):
        with pytest.raises(ValueError, match=why):
            from_dict(_Record, data | change)
    with pytest.raises(ValueError, match=r"key 'a\.b\.inner' must be a JSON object, got 3"):
        from_dict(_Record, data | {"inner": 3}, "a.b")


@dataclasses.dataclass(frozen=True)
class _Game:
    c: float
    ceiling: float


@dataclasses.dataclass(frozen=True)
class _Result:
    name: str
    game: _Game = dataclasses.field(metadata=FLAT_IN_OLDER)


def test_a_field_older_files_held_flat_is_read_from_its_parent():
    assert from_dict(_Result, {"name": "r", "game": {"c": 1.0, "ceiling": 2.0}}) == from_dict(
        _Result, {"name": "r", "c": 1.0, "ceiling": 2.0}
    )
    with pytest.raises(ValueError, match=r"key 'result\.c' must be a number"):
        from_dict(_Result, {"name": "r", "c": "1", "ceiling": 2.0}, "result")


@dataclasses.dataclass(frozen=True)
class _Renamed:
    game: _Game | None = dataclasses.field(default=None, metadata=json_key("result"))
    rounds: list[int] = dataclasses.field(default_factory=list)


def test_a_field_with_a_json_key_is_written_and_read_under_that_key_alone():
    """The code's name of a field may differ from its key in the files: ``json_key`` keeps
    the key (``SiteResults.panoramia`` is ``result`` in every audit file and reply)."""
    renamed = _Renamed(game=_Game(c=1.0, ceiling=2.0), rounds=[1])
    written = json_safe(renamed)
    assert list(written) == ["result", "rounds"] and written["result"] == {"c": 1.0, "ceiling": 2.0}
    assert from_dict(_Renamed, json.loads(json.dumps(written))) == renamed
    assert from_dict(_Renamed, {"game": {"c": 1.0, "ceiling": 2.0}}) == _Renamed()  # not its key
    with pytest.raises(ValueError, match=r"key 'file\.result\.c' must be a number"):
        from_dict(_Renamed, {"result": {"c": "1", "ceiling": 2.0}}, "file")
