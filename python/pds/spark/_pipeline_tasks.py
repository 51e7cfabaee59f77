"""What the Spark jobs of ``pds.spark.update_pipeline`` share: the rows
their phases hand on (:data:`ROWS`), tagging rows with the key range
that holds them (:func:`split`), and :class:`SparkNodes`, which runs one
node's Spark job under its own job group and removes what the job's
tasks wrote that the node's new state does not keep (everything, if the
job fails; the objects of failed and duplicate task attempts, if it
succeeds). The phases themselves, and finding a job's objects, are the
engine-neutral :mod:`pds.producers._split`."""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import re
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, Row, SparkSession, functions
from pyspark.sql.types import BinaryType, ByteType, IntegerType, StringType, StructField, StructType
from remote_store import RemoteStoreError

from pds import _core
from pds.errors import SchemaMismatch
from pds.producers._split import MAX_RANGES, JobObjects, by_range, by_sorted_range
from pds.producers._tasks import _Opts
from pds.producers.errors import ProduceError, produce_error
from pds.producers.pipeline import Pipeline
from pds.spark._arrow_conf import fine_partitions
from pds.spark._job import ABORT_SETTLE_SECONDS, remove_until_settled, spark_store
from pds.spark._job_group import tagged, wait_for_tasks
from pds.spark._workers import explain_worker_failure

__all__ = [
    "MAX_RANGES",
    "ROWS",
    "UNPLANNED",
    "RangeRows",
    "SparkNodes",
    "batches",
    "by_range_in_order",
    "checked_budget",
    "in_range_order",
    "ipc",
    "out",
    "split",
    "task_rows",
    "task_sort_budget",
    "unwrapped",
]

#: Target ranges not planned yet (a stage built for the first time).
UNPLANNED = -2

ROWS = StructType(
    [
        StructField("kind", ByteType(), nullable=False),
        StructField("range", IntegerType(), nullable=False),
        StructField("payload", BinaryType(), nullable=True),
        StructField("meta", StringType(), nullable=True),
    ]
)
"""What the phases hand on: a batch of rows (Arrow IPC) for a key range,
or a task's result (JSON)."""


def ipc(batch: pa.RecordBatch) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return sink.getvalue()


def batches(payload: bytes) -> list[pa.RecordBatch]:
    return list(pa.ipc.open_stream(payload))


def out(kind: int, rng: int, payload: bytes | None, meta: str | None) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"kind": [kind], "range": [rng], "payload": [payload], "meta": [meta]},
        schema=pa.schema(
            [
                pa.field("kind", pa.int8(), nullable=False),
                pa.field("range", pa.int32(), nullable=False),
                pa.field("payload", pa.binary()),
                pa.field("meta", pa.string()),
            ]
        ),
    )


#: One row of :data:`ROWS`: ``(kind, range, payload, meta)``.
Row4 = tuple[int, int, bytes | None, str | None]


class RangeRows:
    """One key range's rows in a task's input sorted by range then by kind,
    descending (:func:`by_range_in_order`): :attr:`held`, the payloads of
    the kinds that come first (removed pairs, derived keys, deleted keys:
    small, kept in memory; :attr:`held_by` per kind, :attr:`held` those of
    the first held kind given), then :meth:`stream`, the batches of the
    kind that comes last (emitted rows, upserts), read from the input as
    the consumer asks."""

    def __init__(self, rng: int, rows: _Peekable, held_kinds: tuple[int, ...], streamed_kind: int) -> None:
        self.rng, self._rows, self._streamed_kind = rng, rows, streamed_kind
        self.held_by: dict[int, list[pa.RecordBatch]] = {k: [] for k in held_kinds}
        while (row := rows.peek()) is not None and row[1] == rng and row[0] in self.held_by:
            rows.pop()
            self.held_by[row[0]].extend(batches(row[2] or b""))
        self.held = self.held_by[held_kinds[0]]

    def _batches(self) -> Iterator[pa.RecordBatch]:
        rows = self._rows
        while (row := rows.peek()) is not None and row[1] == self.rng and row[0] == self._streamed_kind:
            rows.pop()
            yield from batches(row[2] or b"")

    def stream(self) -> pa.RecordBatchReader | list[pa.RecordBatch]:
        """The streamed kind's batches: a reader over the input (``[]`` if the
        range has none). Read it to its end before the next range."""
        row = self._rows.peek()
        if row is None or row[1] != self.rng or row[0] != self._streamed_kind:
            return []
        # Every payload of a range has this schema (the Rust sort's output,
        # or rows conformed to the source's schema): the reader refuses a
        # batch whose schema differs, which would be a bug upstream.
        schema = pa.ipc.open_stream(row[2] or b"").schema
        return pa.RecordBatchReader.from_batches(schema, self._batches())

    def check_read(self) -> None:
        """``RuntimeError`` if rows of this range are left unread after its
        merge returned: never commit a range without all of its rows."""
        row = self._rows.peek()
        if row is not None and row[1] == self.rng and row[0] == self._streamed_kind:
            raise RuntimeError(f"pds: key range {self.rng}'s merge returned before reading all of its rows")


class _Peekable:
    def __init__(self, rows: Iterator[Row4]) -> None:
        self._rows = rows
        self._head: Row4 | None = None

    def peek(self) -> Row4 | None:
        if self._head is None:
            self._head = next(self._rows, None)
        return self._head

    def pop(self) -> Row4 | None:
        row = self.peek()
        self._head = None
        return row


def task_rows(given: Iterator[pa.RecordBatch]) -> Iterator[Row4]:
    """The rows of a task's input of :data:`ROWS`, as ``(kind, range,
    payload, meta)`` tuples, as they are read."""
    for b in given:
        yield from zip(
            b.column("kind").to_pylist(),
            b.column("range").to_pylist(),
            b.column("payload").to_pylist(),
            b.column("meta").to_pylist(),
            strict=True,
        )


def by_range_in_order(
    given: Iterator[pa.RecordBatch], held_kind: int | tuple[int, ...], streamed_kind: int
) -> Iterator[Row4 | RangeRows]:
    """A task's input of :data:`ROWS`, sorted by ``range`` then ``kind``
    descending (:func:`in_range_order`), as it is read: each row of another kind as itself (a task's result, range -1),
    and each range's rows of *held_kind* (one kind or several, each above
    *streamed_kind*) and *streamed_kind* as one
    :class:`RangeRows`, whose stream must be read to its end before the
    next item is asked for (``RuntimeError`` otherwise). Memory: the held
    rows and one input batch."""
    held = held_kind if isinstance(held_kind, tuple) else (held_kind,)
    rows = _Peekable(task_rows(given))
    done: set[int] = set()
    while (row := rows.peek()) is not None:
        if row[0] not in (*held, streamed_kind):
            rows.pop()
            yield row
            continue
        if row[1] in done:  # the input was not sorted as this needs: never merge a range twice
            raise RuntimeError(f"pds: key range {row[1]}'s rows are not together in the task's input")
        done.add(row[1])
        group = RangeRows(row[1], rows, held, streamed_kind)
        yield group
        group.check_read()


def in_range_order(rows: DataFrame) -> DataFrame:
    """*rows* (of :data:`ROWS`) shuffled by ``range`` (adaptive execution
    coalesces the partitions few rows reach: a task may take several
    ranges) and sorted in each task by range, then kind descending, for
    :func:`by_range_in_order`. Spark's sort spills: a range's rows need
    not fit in the executor's memory."""
    return rows.repartition("range").sortWithinPartitions("range", functions.desc("kind"))


def split(
    batch: pa.RecordBatch, stage_view: str, targets: list[str], kind: int, *, by_key: bool = False
) -> Iterator[pa.RecordBatch]:
    """*batch*'s rows as one output row per target range they fall in.
    *by_key*: the rows are sorted by key (a map phase's emitted rows), so
    each range's rows are a slice, and a batch within one range is not
    assigned row by row (:func:`pds.producers._split.by_sorted_range`)."""
    for rng, part in (by_sorted_range if by_key else by_range)(batch, stage_view, targets):
        yield out(kind, rng, ipc(part), None)


_TASK_ERROR = re.compile(
    r"pds\.(?:producers\.errors\.(?P<produce>ProduceError)(?:\[(?P<cls>\w+)\])?|errors\.(?P<schema>SchemaMismatch)): "
    r"(?P<message>[^\n]*)"
)
#: A source-apply task's ``ValueError`` for a key both upserted and deleted (the Rust check's words).
_BOTH = re.compile(r"^ValueError: (?P<message>key .* is both upserted and deleted in one update: .*)$", re.MULTILINE)
#: A ``ProduceError``'s message: ``stage 'n' failed on key K: Class: error``, or
#: ``failed on keys A … B`` for a batched call (:func:`pds.producers.errors.produce_error`).
_PRODUCE = re.compile(r"^stage '(?P<stage>[^']*)' failed on (?P<keys>keys?) (?P<rest>.*)$")
#: Where the key or keys may end: before ``: Class: `` (the user's exception).
_CLASS = re.compile(r": (?=(\w+): )")
_RANGE = " … "
#: A store error's last traceback line: ``remote_store._errors.NotFound: message | path='k'``.
_STORE_ERROR = re.compile(
    r"^(?P<module>(?:remote_store|pds)(?:\.\w+)*)\.(?P<cls>\w+): (?P<message>.*?)"
    r"(?: \| path=(?P<path>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"))?"
    r"(?: \| backend=(?P<backend>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"))?$",
    re.MULTILINE,
)


def _store_error(text: str) -> RemoteStoreError | None:
    """The ``remote_store.RemoteStoreError`` (remote-store's class, or a
    pds subclass) whose traceback line *text* holds, rebuilt with its
    message, path and backend; ``None`` if it holds none. The last such
    line is the one the task raised."""
    made: RemoteStoreError | None = None
    for found in _STORE_ERROR.finditer(text):
        module = sys.modules.get(found.group("module"))
        cls = getattr(module, found.group("cls"), None)
        if not (isinstance(cls, type) and issubclass(cls, RemoteStoreError)):
            continue
        quoted = {k: found.group(k) for k in ("path", "backend")}
        extra: dict[str, str | None] = {}
        for name, value in quoted.items():
            with contextlib.suppress(ValueError, SyntaxError):
                extra[name] = None if value is None else str(ast.literal_eval(value))
        with contextlib.suppress(Exception):  # a class with another constructor: not rebuilt
            made = cls(found.group("message"), **extra)
    return made


def _literal(text: str) -> tuple[bool, Any]:
    """``(True, value)`` of the Python literal *text* (a key's repr), else
    ``(False, text)``."""
    try:
        return True, ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, text


def _keys(text: str, batched: bool) -> tuple[Any, Any] | tuple[Any] | None:
    """The key of *text* (``K``: ``(key,)``) or, *batched*, its first and
    last key (``A … B``: ``(first, last)``), if each is a Python literal;
    else ``None``."""
    if not batched:
        ok, key = _literal(text)
        return (key,) if ok else None
    at = text.find(_RANGE)
    while at >= 0:
        (ok, first), (ok_last, last) = _literal(text[:at]), _literal(text[at + len(_RANGE) :])
        if ok and ok_last:
            return first, last
        at = text.find(_RANGE, at + 1)
    return None


def _produce_where(message: str) -> tuple[str, tuple[Any, Any] | tuple[Any], str, str] | None:
    """A ``ProduceError`` message read back: ``(stage, keys, the user's
    exception class name, its message)``, *keys* ``(key,)`` or, for a
    batched call, ``(first, last)``; ``None`` if it is not one. A key's
    repr may hold the message's own separators (``: Name: ``, `` … ``):
    the first reading whose keys are Python literals is taken, else the
    first reading, with the keys as text."""
    found = _PRODUCE.match(message)
    if found is None:
        return None
    rest, batched = found.group("rest"), found.group("keys") == "keys"
    first_reading: tuple[str, str, str] | None = None
    for end in _CLASS.finditer(rest):
        text, cls = rest[: end.start()], end.group(1)
        error = rest[end.end() + len(cls) + 2 :]
        keys = _keys(text, batched)
        if keys is not None:
            return found.group("stage"), keys, cls, error
        first_reading = first_reading or (text, cls, error)
    if first_reading is None:
        return None
    text, cls, error = first_reading
    if not batched:
        return found.group("stage"), (text,), cls, error
    first, range_, last = text.partition(_RANGE)
    return found.group("stage"), (first, last if range_ else first), cls, error


def unwrapped(exc: BaseException) -> BaseException:
    """The pds error a task raised, as the local update raises it, when
    Spark's error carries one: ``SchemaMismatch``, or ``ProduceError``
    naming the stage and the key (a batched call: its first and last keys,
    ``key`` and ``last_key``; each as Python reads its repr back, else the
    repr), also an instance of the user's exception class where that is a
    built-in one (``except ZeroDivisionError`` catches it); ``ValueError``
    for a key a source's change both upserts and deletes; a store error
    (``remote_store.BackendUnavailable``, say) as its own class, with its
    message and path; else *exc*."""
    found = _TASK_ERROR.search(str(exc))
    if found is None:
        both = _BOTH.search(str(exc))
        if both is not None:
            return ValueError(both.group("message"))
        return _store_error(str(exc)) or exc
    message = found.group("message")
    if found.group("schema"):
        return SchemaMismatch(message)
    where = _produce_where(message)
    if where is None:
        return ProduceError(message)
    stage, keys, cls_name, error = where
    cls = getattr(builtins, cls_name, None)
    original: BaseException = Exception(error)
    if isinstance(cls, type) and issubclass(cls, Exception):
        with contextlib.suppress(Exception):
            original = cls(error)
    made = produce_error(original, stage, *keys)
    made.args = (message,)
    return made


def task_sort_budget(spark: SparkSession, pipeline_budget: int) -> int:
    """The external-sort memory of each task of ``update_pipeline``: the
    pipeline's ``sort_budget``, capped at half of one task's share of its
    executor's memory (but never capped below 16 MiB). The memory is
    ``spark.executor.pyspark.memory`` if set (it bounds the Python
    workers), else ``spark.executor.memory`` (1 GiB by default; on a local
    master, the driver's); a number without a unit is MiB, as Spark reads
    it. The tasks sharing it: ``spark.executor.cores``, else on a local
    master the number of task slots, else 1."""
    sc = spark.sparkContext
    conf = sc.getConf()
    local = (sc.master or "").startswith("local")
    names = ["spark.executor.pyspark.memory", "spark.executor.memory"] + (["spark.driver.memory"] if local else [])
    memory = next((conf.get(n) for n in names if conf.get(n)), None) or "1g"
    try:
        mib = int(sc._jvm.org.apache.spark.network.util.JavaUtils.byteStringAsMb(memory))  # type: ignore[union-attr]
        given_cores = conf.get("spark.executor.cores")
        cores = int(given_cores) if given_cores else (sc.defaultParallelism if local else 1)
    except Exception:  # noqa: BLE001 - an unreadable setting: the pipeline's budget stands
        return pipeline_budget
    cap = max(16 << 20, (mib << 20) // max(1, cores) // 2)
    return min(pipeline_budget, cap)


def checked_budget(sort_budget: int | None) -> int | None:
    """*sort_budget* as given to ``update_pipeline``: ``None`` or an int of at
    least 1 MiB, else ``ValueError``/``TypeError`` (no Spark job, no I/O)."""
    if sort_budget is None:
        return None
    if isinstance(sort_budget, bool) or not isinstance(sort_budget, int):
        raise TypeError(f"sort_budget must be an int (bytes) or None, got {type(sort_budget).__name__}")
    if sort_budget < 1 << 20:
        raise ValueError(f"sort_budget must be at least 1 MiB (1048576 bytes), got {sort_budget}")
    return sort_budget


class SparkNodes(JobObjects):
    """Runs nodes' Spark jobs for one update of pipeline *p*: every object
    their tasks write is named after :attr:`job` (one id per update,
    shared by the source and stage runners), so the driver finds it by a
    LIST of the node's folders (:class:`JobObjects`). :attr:`stats`
    records per node what its job did (benchmarks and tests read it)."""

    def __init__(
        self,
        spark: SparkSession,
        p: Pipeline,
        *,
        job: str | None = None,
        stats: dict[str, dict[str, int]] | None = None,
        sort_budget: int | None = None,
    ) -> None:
        store = spark_store(p.store)
        super().__init__(store, store.unwrap(_core.RustStore), p.key, job or f"sp{uuid.uuid4().hex[:12]}")
        self.spark = spark
        self.p = p
        self.stats: dict[str, dict[str, int]] = {} if stats is None else stats
        #: Each task's external-sort memory (:func:`task_sort_budget`).
        self.sort_budget = task_sort_budget(spark, p._sort_budget) if sort_budget is None else sort_budget

    def opts(self, opts: _Opts) -> _Opts:
        """A node's engine options with this update's per-task sort budget."""
        return {**opts, "sort_budget": self.sort_budget}

    def _group(self, node: str) -> str:
        """The Spark job group of this update's jobs for *node*."""
        return f"pds-pipeline-{self.job}-{node}"

    def _tagged(self, node: str, what: str) -> contextlib.AbstractContextManager[None]:
        """Run the body's Spark jobs in *node*'s job group, described as *what*."""
        return tagged(self.spark, self._group(node), f"pds.spark.update_pipeline {self.p.key!r} {what} {node!r}")

    def _collect(self, node: str, what: str, run: Callable[[], list[Row]], *, also: Sequence[str] = ()) -> list[Row]:
        """*run* (the node's Spark job or jobs, returning the collected rows)
        under the node's job group, until its tasks have ended (speculative
        duplicates still running write no more). If it fails: everything
        the job wrote for the node (and for the nodes *also* named: a chain
        of stages run in its job) removed (after its last task ended),
        and the pds error a task raised raised as the local update raises
        it (:func:`unwrapped`)."""
        group = self._group(node)

        def written() -> list[str]:
            return [k for n in (node, *also) for k in self._job_objects(n)]

        try:
            with self._tagged(node, what), fine_partitions(self.spark):
                rows = run()
        except BaseException as exc:
            wait_for_tasks(self.spark, group)  # no task may write after the cleanup
            self._remove(written())
            remove_until_settled(written, self._remove, ABORT_SETTLE_SECONDS)
            clear = explain_worker_failure(exc)
            if clear is not None:
                raise clear from exc
            raise unwrapped(exc) from exc
        wait_for_tasks(self.spark, group)
        return rows

    def _jobs(self, node: str) -> int:
        """The Spark jobs run for *node* in this update (0 where Spark has no
        status tracker: Spark Connect)."""
        try:
            return len(self.spark.sparkContext.statusTracker().getJobIdsForGroup(self._group(node)))
        except Exception:  # noqa: BLE001 - Spark Connect: no SparkContext
            return 0
