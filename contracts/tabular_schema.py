"""The encoding of a tabular record, as the data layer writes it and the audit reads it.

Tabular records are float arrays ``(n, d)`` of *encoded* features (numeric columns
standardised, categorical columns one-hot; ``ml.datasets.tabular``). Which encoded columns
form one source attribute comes from the dataset's schema when there is one
(``schema["columns"]``, each with ``name``, ``kind`` in {"numeric", "categorical"},
``start`` and ``width``), or else from the data itself: a run of adjacent 0/1 columns whose
row sums are all exactly 1 is one one-hot attribute, every other column is its own numeric
attribute. The encoding is therefore self-describing.

Standard library only: the arrays are read through their own operators (any numpy-like
array), so both sides import this without numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

AttributeKind = Literal["numeric", "onehot"]


@dataclass(frozen=True)
class Attribute:
    """One source attribute: a numeric column or a one-hot group of columns."""

    name: str
    kind: AttributeKind
    start: int
    width: int

    @property
    def columns(self) -> slice:
        return slice(self.start, self.start + self.width)


def attributes_from_schema(schema: dict[str, Any], d: int) -> list[Attribute]:
    """Attributes listed in ``schema["columns"]``; they must tile the ``d`` encoded columns."""
    out: list[Attribute] = []
    position = 0
    for i, col in enumerate(schema.get("columns", [])):
        try:
            name, kind = str(col["name"]), str(col["kind"])
            start, width = int(col["start"]), int(col["width"])
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(
                f"schema.columns[{i}]: needs name, kind, start, width ({err})"
            ) from None
        if start != position or width < 1:
            raise ValueError(
                f"schema.columns[{i}] ({name!r}): start={start} width={width} does "
                f"not continue the encoding at column {position}"
            )
        out.append(Attribute(name, "onehot" if kind == "categorical" else "numeric", start, width))
        position += width
    if position != d:
        raise ValueError(f"schema covers {position} encoded columns but the records have {d}")
    return out


def infer_attributes(x: Any) -> list[Attribute]:
    """Attributes of an encoded table ``x`` (an ``(n, d)`` array) without a schema (see the
    module docstring)."""
    n, d = x.shape
    binary = [n > 0 and bool(((x[:, j] == 0.0) | (x[:, j] == 1.0)).all()) for j in range(d)]
    out: list[Attribute] = []
    j = 0
    while j < d:
        group_end = None
        if binary[j]:
            total = 0.0 * x[:, j]
            k = j
            # Extend while the running row sum stays <= 1; remember the last exact-1 point.
            while k < d and binary[k]:
                total = total + x[:, k]
                if (total > 1).any():
                    break
                if k > j and (total == 1).all():
                    group_end = k + 1
                k += 1
        if group_end is not None:
            out.append(Attribute(f"col{j}-{group_end - 1}", "onehot", j, group_end - j))
            j = group_end
        else:
            out.append(Attribute(f"col{j}", "numeric", j, 1))
            j += 1
    return out


def resolve_attributes(x: Any, schema: dict[str, Any] | None) -> list[Attribute]:
    """The schema's attributes when there is a schema, else those inferred from ``x``."""
    return attributes_from_schema(schema, x.shape[1]) if schema else infer_attributes(x)
