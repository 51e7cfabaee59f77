"""How the reduce and source-apply tasks of ``pds.spark.update_pipeline``
read their input: rows sorted by key range, each range's held rows in
memory and its streamed rows read as the range's merge asks for them
(``pds.spark._pipeline_tasks.by_range_in_order``). No Spark needed: the
input is the Arrow batches a task receives."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from pds.spark._pipeline_tasks import RangeRows, by_range_in_order, ipc, out

HELD, STREAMED, RESULT = 1, 0, 2


def payload(*values: int) -> bytes:
    return ipc(pa.record_batch({"k": pa.array(values, pa.int64())}))


def task_input(rows: list[tuple[int, int, bytes | None, str | None]], per_batch: int) -> Iterator[pa.RecordBatch]:
    """*rows* as a task receives them: Arrow batches of *per_batch* rows."""
    made = [out(*r) for r in rows]
    for i in range(0, len(made), per_batch):
        yield pa.Table.from_batches(made[i : i + per_batch]).combine_chunks().to_batches()[0]


def values(batches: list[pa.RecordBatch] | pa.RecordBatchReader) -> list[int]:
    return [v for b in batches for v in b.column("k").to_pylist()]


@pytest.mark.parametrize("per_batch", [1, 2, 100])
def test_each_range_holds_its_first_kind_and_streams_the_other(per_batch: int) -> None:
    rows = [
        (RESULT, -1, None, "a task's result"),
        (HELD, 0, payload(1), None),
        (STREAMED, 0, payload(10, 11), None),
        (STREAMED, 0, payload(12), None),
        (STREAMED, 3, payload(30), None),
        (HELD, 5, payload(5), None),
        (HELD, 5, payload(6), None),
    ]
    read: list[tuple[int, list[int], list[int]]] = []
    passed = []
    for item in by_range_in_order(task_input(rows, per_batch), HELD, STREAMED):
        if isinstance(item, RangeRows):
            read.append((item.rng, values(item.held), values(item.stream())))
        else:
            passed.append(item)
    assert passed == [(RESULT, -1, None, "a task's result")]
    assert read == [(0, [1], [10, 11, 12]), (3, [], [30]), (5, [5, 6], [])]


def test_the_stream_is_read_lazily_and_rows_left_unread_fail_the_task() -> None:
    """The task's input is pulled only as the range's stream is read; a range
    whose merge returned before reading all of its rows fails the task
    instead of being committed without them."""
    pulled: list[int] = []
    rows = [(STREAMED, 0, payload(i), None) for i in range(5)] + [(STREAMED, 1, payload(100), None)]

    def counted() -> Iterator[pa.RecordBatch]:
        for i, b in enumerate(task_input(rows, 1)):
            pulled.append(i)
            yield b

    items = by_range_in_order(counted(), HELD, STREAMED)
    first = next(items)
    assert isinstance(first, RangeRows)
    stream = first.stream()
    assert isinstance(stream, pa.RecordBatchReader)
    assert pulled == [0], "nothing past the range's first row is read before its stream is"
    assert values([stream.read_next_batch()]) == [0]
    assert len(pulled) <= 2
    with pytest.raises(RuntimeError, match="before reading all of its rows"):
        next(items)

    items = by_range_in_order(task_input(rows, 2), HELD, STREAMED)
    whole = next(items)
    assert isinstance(whole, RangeRows)
    assert values(whole.stream()) == [0, 1, 2, 3, 4]
    second = next(items)
    assert isinstance(second, RangeRows) and second.rng == 1
    assert values(second.stream()) == [100]


def test_a_range_split_in_two_is_refused() -> None:
    """Input not sorted by range would merge a range twice (the second merge
    replacing the first's parts): refused instead."""
    rows = [(STREAMED, 0, payload(1), None), (STREAMED, 1, payload(2), None), (STREAMED, 0, payload(3), None)]
    with pytest.raises(RuntimeError, match="not together"):
        for item in by_range_in_order(task_input(rows, 10), HELD, STREAMED):
            if isinstance(item, RangeRows):
                values(item.stream())
