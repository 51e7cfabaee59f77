"""An output stream on its way to pds: rows counted, and each row checked to
lie in the partitions being written."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from pds.dagster.partitions import PartitionSlice
from pds.table import _evaluate


class OutsidePartition(ValueError):
    """A row of an output lies outside the partitions it is written to."""


class CheckedStream:
    """Wraps *reader*: counts rows and, with *slice*, refuses the first row
    outside it (:class:`OutsidePartition`, naming the row), before the batch
    holding it reaches the writer, so nothing of that write commits."""

    def __init__(
        self, reader: pa.RecordBatchReader, slice: PartitionSlice | None, asset: str, *, streamed: bool = True
    ) -> None:
        self._source = reader
        self.streamed = streamed
        self._slice = slice
        self._asset = asset
        self.rows = 0
        self.started = False
        self.error: OutsidePartition | None = None
        self.reader = pa.RecordBatchReader.from_batches(reader.schema, self._batches())

    def _batches(self) -> Iterator[pa.RecordBatch]:
        for batch in self._source:
            self.started = True
            if self._slice is not None and batch.num_rows:
                self._check(batch)
            self.rows += batch.num_rows
            yield batch

    def _check(self, batch: pa.RecordBatch) -> None:
        assert self._slice is not None
        outside = pc.invert(_evaluate(batch, [self._slice.expression])[0].fill_null(False))
        if pc.any(outside).as_py():
            index = pc.index(outside, True).as_py()
            row = {c: batch.column(c)[index].as_py() for c in self._slice.columns}
            self.error = OutsidePartition(
                f"asset {self._asset}: row {self.rows + index} of the output lies outside {self._slice.description} "
                f"(its partition column{'s' if len(row) > 1 else ''}: {row}); nothing was written"
            )
            raise self.error

    def reraise(self, exc: BaseException) -> None:
        """Raise the check's own error if it is what failed the write."""
        if self.error is not None:
            raise self.error from exc
