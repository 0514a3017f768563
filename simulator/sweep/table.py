"""The sweep table as plain rows, and its CSV written without pandas.

A sweep's answer to Python callers is a pandas DataFrame (:func:`Table.frame`). The CLI
only prints it as CSV, and ``import pandas`` costs about half a CPU-second, as much as
simulating 25 dense plans (issue 16's sweep-throughput bar counts it). So the rows stay
plain dictionaries until a caller asks for a frame, and :meth:`Table.write_csv` writes
the very text ``frame.to_csv(index=False)`` would: one ``csv`` writer (pandas uses the
same module, minimal quoting, ``\\n`` line ends) fed each column formatted the way
pandas formats that column's dtype:

* ints, with or without gaps (nullable ``Int64``): ``str(int)``; a gap is empty;
* a column of ints and floats is float64 in pandas: every number as ``repr(float(v))``
  (``2`` becomes ``2.0``, numpy's float text is Python's shortest repr);
* bools: ``True`` / ``False``; anything else (text, mixed kinds): ``str(v)``;
* missing values (``None``, NaN) are empty in every dtype.

``tests/test_sweep_table.py`` compares the text with pandas' on sweeps with invalid rows,
gaps and mixed kinds.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


def missing(v: Any) -> bool:
    """None or NaN: an empty cell."""
    return v is None or (isinstance(v, float) and v != v)


def _kinds(values: list[Any]) -> tuple[list[Any], set[type]]:
    present = [v for v in values if not missing(v)]
    return present, {type(v) for v in present}


@dataclass
class Table:
    """Rows (dicts keyed by column) in order, the column order, and the sweep's counts."""

    rows: list[dict[str, Any]]
    columns: list[str]
    counts: dict[str, int] = field(default_factory=dict)

    def column(self, name: str) -> list[Any]:
        return [row.get(name) for row in self.rows]

    def frame(self) -> pd.DataFrame:
        """The DataFrame (counts in ``.attrs``). Columns of ints or bools with gaps (invalid
        rows) keep nullable Int64 / boolean dtypes."""
        import pandas as pd  # heavy (~0.5 s): loaded when a frame is asked for

        data: dict[str, Any] = {}
        for col in self.columns:
            values = self.column(col)
            present, kinds = _kinds(values)
            if present and len(present) < len(values) and kinds <= {int, bool} \
                    and len(kinds) == 1:
                dtype = "Int64" if kinds == {int} else "boolean"
                data[col] = pd.array([None if missing(v) else v for v in values], dtype=dtype)
            else:
                data[col] = values
        frame = pd.DataFrame(data, columns=self.columns)
        frame.attrs["counts"] = dict(self.counts)
        return frame

    def write_csv(self, out: IO[str]) -> None:
        """The text of ``self.frame().to_csv(out, index=False)``, without pandas."""
        cells = [_formatter(self.column(col)) for col in self.columns]
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(self.columns)
        writer.writerows(zip(*cells, strict=True))


def _formatter(values: list[Any]) -> list[str]:
    """Each cell of one column as pandas writes that column's dtype (module docstring)."""
    _, kinds = _kinds(values)
    text: Callable[[Any], str] = str
    if kinds and kinds <= {int, float} and float in kinds:
        text = _float_text  # pandas: float64
    return ["" if missing(v) else text(v) for v in values]


def _float_text(v: Any) -> str:
    return repr(float(v))
