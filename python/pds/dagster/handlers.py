"""Type handlers: each in-memory type an asset returns or takes, to and from
an Arrow stream.

Outputs become a ``pyarrow.RecordBatchReader``: a ``pyarrow.Table`` or
``RecordBatch``, a polars or pandas DataFrame, a DuckDB relation, or anything
with ``__arrow_c_stream__`` (streamed, never collected). Inputs are built from
a reader by the asset's parameter annotation: ``pyarrow.Table`` (the default),
``pyarrow.RecordBatchReader`` (streamed), ``polars.DataFrame``,
``polars.LazyFrame`` or ``pandas.DataFrame``.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

__all__ = ["Output", "from_reader", "input_types", "is_partition_dict", "to_reader"]

_ACCEPTED = (
    "a pyarrow Table, RecordBatch or RecordBatchReader, a polars or pandas DataFrame, "
    "a DuckDB relation, or an object with __arrow_c_stream__"
)


@dataclass
class Output:
    """An output as a stream: its reader, and whether it came as a stream
    (``True``: it can fail while it is read; ``False``: it was in memory)."""

    reader: pa.RecordBatchReader
    streamed: bool


def _module(obj: object) -> str:
    return type(obj).__module__.split(".", 1)[0]


def to_reader(obj: object, what: str = "an asset output") -> Output:
    """*obj* as an Arrow stream, without copying in-memory data.

    Raises:
        TypeError: *obj* is none of the accepted types (naming its type).
    """
    if isinstance(obj, pa.Table):
        return Output(obj.to_reader(), streamed=False)
    if isinstance(obj, pa.RecordBatch):
        return Output(pa.Table.from_batches([obj]).to_reader(), streamed=False)
    if isinstance(obj, pa.RecordBatchReader):
        return Output(obj, streamed=True)
    module = _module(obj)
    if module == "polars" and type(obj).__name__ == "LazyFrame":
        return Output(obj.collect().to_arrow().to_reader(), streamed=False)  # type: ignore[attr-defined]
    if module == "polars" and hasattr(obj, "to_arrow"):
        return Output(obj.to_arrow().to_reader(), streamed=False)
    if module == "pandas" and type(obj).__name__ == "DataFrame":
        # As remote-store: an index other than the default range is kept as columns.
        return Output(pa.Table.from_pandas(obj).to_reader(), streamed=False)
    if hasattr(obj, "__arrow_c_stream__"):
        try:
            return Output(pa.RecordBatchReader.from_stream(obj), streamed=True)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise TypeError(f"{what} must be {_ACCEPTED}: its __arrow_c_stream__ failed: {exc}") from exc
    if module == "duckdb" and hasattr(obj, "fetch_record_batch"):
        return Output(obj.fetch_record_batch(), streamed=True)
    raise TypeError(f"{what} must be {_ACCEPTED}; got {type(obj).__module__}.{type(obj).__qualname__}")


def _polars_frame(reader: pa.RecordBatchReader) -> Any:
    import polars as pl

    return pl.from_arrow(reader.read_all())


def _polars_lazy(reader: pa.RecordBatchReader) -> Any:
    return _polars_frame(reader).lazy()


def _pandas(reader: pa.RecordBatchReader) -> Any:
    return reader.read_all().to_pandas()


#: Input conversions by (module, class name) of the annotation.
_INPUTS: dict[tuple[str, str], Callable[[pa.RecordBatchReader], Any]] = {
    ("pyarrow", "Table"): pa.RecordBatchReader.read_all,
    ("pyarrow", "RecordBatchReader"): lambda reader: reader,
    ("polars", "DataFrame"): _polars_frame,
    ("polars", "LazyFrame"): _polars_lazy,
    ("pandas", "DataFrame"): _pandas,
}


def input_types() -> list[str]:
    """The input annotations understood, for messages."""
    return [f"{m}.{n}" for m, n in _INPUTS]


def _key(target: object) -> tuple[str, str] | None:
    if not isinstance(target, type):
        return None
    return target.__module__.split(".", 1)[0], target.__name__


def is_partition_dict(target: object) -> bool:
    """Whether *target* is a ``dict[...]`` / ``Mapping[...]`` annotation."""
    origin = typing.get_origin(target)
    return origin is dict or (isinstance(origin, type) and issubclass(origin, typing.Mapping))


def value_type(target: object) -> object:
    """The value type of a ``dict[str, X]`` annotation, else *target*."""
    if is_partition_dict(target):
        args = typing.get_args(target)
        return args[1] if len(args) == 2 else Any
    return target


def from_reader(reader: pa.RecordBatchReader, target: object) -> Any:
    """The input value of annotation *target* read from *reader*. No
    annotation, ``Any`` or ``object`` gives a ``pyarrow.Table``.

    Raises:
        TypeError: an annotation no handler takes (naming those that exist).
    """
    target = value_type(target)
    if target is None or target is Any or target is object:
        return reader.read_all()
    key = _key(target)
    convert = _INPUTS.get(key) if key is not None else None
    if convert is None:
        raise TypeError(f"pds.dagster loads inputs as {', '.join(input_types())}; the input is annotated {target!r}")
    return convert(reader)
