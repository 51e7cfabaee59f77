"""Calling the user's ``Produce`` on the groups the Rust engine hands out,
and handing what it emits back, checked against the stage's schema.

Row form: one call per source key, ``fn(key, values, ...)``, one lazy,
single-use sequence of dicts per source. A group larger than a chunk is
streamed across chunks. Batched form: one call per chunk of whole groups,
``fn(table, ...)``, one ``pyarrow.Table`` per source; it returns the target
key, value and source key columns. A single-source group larger than
``BATCH_GROUP_MAX`` rows comes over several calls, each with a slice of it.

Both forms' output is converted exactly (:mod:`pds.producers.exact`): a
value its column cannot hold exactly is a ``SchemaMismatch`` naming the
stage, the column and the value. The row form's values are handed over as
:func:`pds.producers.exact.to_python` makes them (the same Python types
with or without pandas).
"""

from __future__ import annotations

import copy
import datetime
import decimal
import itertools
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pds import _core
from pds.errors import DataError, SchemaMismatch
from pds.producers.errors import produce_error
from pds.producers.exact import Inexact, Unrepresentable, conform, from_python, show, to_python
from pds.producers.graph import SOURCE_PREFIX, Node

__all__ = ["run_batched", "run_rows"]

#: Rows per chunk handed to the row form, and rows per batch pushed back.
ROW_CHUNK = 8192
#: Rows per chunk for the batched form (whole groups, so perhaps more).
BATCH_CHUNK = 65536
#: A larger group is handed to the batched form over several calls (the
#: engine ends a chunk of whole groups past 8 times the rows asked for).
BATCH_GROUP_MAX = 8 * BATCH_CHUNK
#: A join's chunks: keys per chunk.
JOIN_KEYS = 1024
#: A join's chunks: rows of each source per chunk. A key with more rows on a
#: source is handed over in pieces of this many rows: the row form's value
#: iterators pull them as they are read (each source on its own), the batched
#: form gets the rest of that key over further calls.
JOIN_SIDE_ROWS = 65536


def _mismatch(stage: Node, detail: str) -> SchemaMismatch:
    return SchemaMismatch(f"stage {stage.name!r}: output does not match its declared schema: {detail}")


def _inexact(stage: Node, column: str, e: Inexact) -> SchemaMismatch:
    return _mismatch(stage, f"column {column!r}: {e}")


def _python(stage: Node, batch: pa.RecordBatch) -> list[list[Any]]:
    """*batch*'s columns as Python values (:func:`exact.to_python`)."""
    out = []
    for name, col in zip(batch.schema.names, batch.columns, strict=True):
        try:
            out.append(to_python(col))
        except Unrepresentable as e:
            raise DataError(f"stage {stage.name!r}: column {name!r}: {e}") from None
    return out


def _key_values(stage: Node, keys: pa.RecordBatch, care: bool = True) -> list[Any]:
    """The keys as Python values (a tuple each for a compound key); *care*:
    whether the key types need :func:`exact.to_python` (see ``needs_care``)."""
    cols = _python(stage, keys) if care else [c.to_pylist() for c in keys.columns]
    if len(cols) == 1:
        return cols[0]
    return list(zip(*cols, strict=True))


def _dict_maker(names: list[str]) -> Any:
    """A function of one value per name that builds the row's dict (a dict
    display: about twice as fast as ``dict(zip(names, row))``). The names
    are bound as defaults, never spliced into the code."""
    if not names:
        return dict
    params = ", ".join(f"_v{j}" for j in range(len(names)))
    bound = ", ".join(f"_k{j}=_names[{j}]" for j in range(len(names)))
    body = ", ".join(f"_k{j}: _v{j}" for j in range(len(names)))
    return eval(f"lambda {params}, *, {bound}: {{{body}}}", {"_names": list(names)})


def _rows(stage: Node, rows: pa.RecordBatch, maker: Any) -> list[dict[str, Any]]:
    """The rows as dicts of Python values (:func:`exact.to_python`), built
    by *maker* (:func:`_dict_maker` of the batch's names)."""
    cols = _python(stage, rows)
    if not cols:
        return [{} for _ in range(rows.num_rows)]
    return list(map(maker, *cols))


#: What converting stored values can raise (``Unrepresentable`` as
#: ``DataError``; pyarrow's ``OverflowError`` for a date past year 9999).
_CONVERSION = (DataError, ArithmeticError, ValueError, pa.ArrowException)


class _ChunkRows:
    """One chunk's rows as dicts, converted once for the whole chunk, on the
    first request (a chunk whose values Produce never reads is not
    converted). If the chunk holds a value that has no Python value (a
    ``DataError``, or pyarrow's ``OverflowError`` for a date past year
    9999), each group's rows are converted alone, as asked for, so that the
    error comes from the group that holds it, only if Produce reads it, as
    it would one group at a time."""

    __slots__ = ("dicts", "failed", "maker", "rows", "stage")

    def __init__(self, stage: Node, rows: pa.RecordBatch, maker: Any) -> None:
        self.stage = stage
        self.rows = rows
        self.maker = maker
        self.dicts: list[dict[str, Any]] | None = None
        self.failed = False

    def get(self, start: int, end: int) -> list[dict[str, Any]]:
        if self.dicts is None and not self.failed:
            try:
                self.dicts = _rows(self.stage, self.rows, self.maker)
            except _CONVERSION:  # raised again by the group that holds it
                self.failed = True
        if self.dicts is not None:
            return self.dicts[start:end]
        return _rows(self.stage, self.rows.slice(start, end - start), self.maker)


def _chunk_keys(stage: Node, keys: pa.RecordBatch) -> list[Any] | None:
    """The chunk's keys as Python values, or ``None`` if one has none (then
    each is converted alone, so the error names the key it is about)."""
    try:
        return _key_values(stage, keys)
    except _CONVERSION:  # raised again for the key it is about
        return None


#: Value types that are never a ``Mapping`` (checked without the ABC).
_PLAIN = frozenset({int, float, str, bytes, bool, type(None)})
#: Value types that cannot change after a yield: kept as they are. Every
#: other value is copied at its yield (:func:`_snapshot`).
_IMMUTABLE = _PLAIN | {
    decimal.Decimal,
    datetime.date,
    datetime.datetime,
    datetime.time,
    datetime.timedelta,
    datetime.timezone,
}


def _snapshot(value: Any) -> Any:
    """*value* as it is now, for a pair to hold what it held at its yield
    (the pairs are converted a buffer at a time, and ``Produce`` may change
    an object after yielding it): lists, dicts, tuples and other mappings
    rebuilt, element by element; any other object not known to be
    immutable deep-copied (kept as is if it cannot be copied: its
    conversion then refuses it, or takes it as it is at the flush)."""
    t = type(value)
    if t in _IMMUTABLE:
        return value
    if t is list:
        return [_snapshot(v) for v in value]
    if t is tuple:
        return tuple([_snapshot(v) for v in value])
    if t is dict or isinstance(value, Mapping):
        return {k: _snapshot(v) for k, v in value.items()}
    try:
        return copy.deepcopy(value)
    except Exception:  # noqa: BLE001 - an object that cannot be copied is converted as it is
        return value


class _Emitter:
    """Buffers ``(target key, value)`` pairs of the row form and pushes them
    as Arrow batches of the stage's physical schema."""

    def __init__(self, stage: Node, run: _core.StageRun) -> None:
        self.stage = stage
        self.run = run
        self.schema = stage.physical_schema
        self.value_names = stage.value.names
        self.value_set = frozenset(self.value_names)
        self.single_value = len(self.value_names) == 1
        self.targets: list[Any] = []
        # Per emitted row: the value itself for a single-value stage, else
        # its mapping.
        self.values: list[Any] = []
        # The source key of each emitted row: runs of indices into one
        # chunk's key batch.
        self.segments: list[tuple[pa.RecordBatch, list[int]]] = []
        self.seg_keys: pa.RecordBatch | None = None
        self.seg_index: list[int] = []

    def emit_all(self, result: Any, keys: pa.RecordBatch, index: int, key: Any) -> None:
        """Take every pair *result* yields for source key *key* (row *index*
        of *keys*). The common shapes (a 2-tuple whose value is a plain
        scalar, or a dict of the value fields) are checked inline; others go
        through :meth:`_pair` and :meth:`_value`, which give the exact errors."""
        targets, values = self.targets, self.values
        single, value_set = self.single_value, self.value_set
        name = self.value_names[0]
        immutable = _IMMUTABLE
        base = len(targets)  # this call's first row in the buffer
        for pair in result:
            if type(pair) is tuple and len(pair) == 2:
                target, value = pair
            else:
                target, value = self._pair(pair, key)
            # Each pair is kept as it is at its yield: what can change is copied.
            tv = type(value)
            if single and tv in _PLAIN:
                values.append(value)
            elif tv is dict and value.keys() == value_set:
                if single:
                    value = value[name]
                    values.append(value if type(value) in immutable else _snapshot(value))
                elif immutable.issuperset(map(type, value.values())):
                    values.append(value.copy())
                else:
                    values.append(_snapshot(value))
            else:
                values.append(_snapshot(self._value(value, key)))
            tt = type(target)
            if tt not in immutable and not (tt is tuple and immutable.issuperset(map(type, target))):
                target = _snapshot(target)
            targets.append(target)
            if len(targets) >= ROW_CHUNK:
                self._sources(keys, index, len(targets) - base)
                self.flush()
                base = 0
        self._sources(keys, index, len(targets) - base)

    def _sources(self, keys: pa.RecordBatch, index: int, n: int) -> None:
        """Note that the last *n* buffered rows came from row *index* of *keys*."""
        if not n:
            return
        if keys is not self.seg_keys:
            self.seg_keys, self.seg_index = keys, []
            self.segments.append((keys, self.seg_index))
        self.seg_index += [index] * n

    def _pair(self, pair: Any, key: Any) -> tuple[Any, Any]:
        if not isinstance(pair, tuple) or len(pair) != 2:
            # Not unpacked blindly: "ab" would become key "a", value "b", and
            # a list [k, v] may be a value the yield forgot to pair.
            raise _mismatch(
                self.stage, f"Produce must yield (key, value) pairs (2-tuples); key {key!r} yielded {show(pair)}"
            )
        return pair[0], pair[1]

    def _value(self, value: Any, key: Any) -> Any:
        """*value* as buffered (see :attr:`values`), checked."""
        if not isinstance(value, Mapping):
            if not self.single_value:
                raise _mismatch(self.stage, f"a value must be a dict of {self.value_names}, got {value!r}")
            return value
        if value.keys() != self.value_set:
            extra = sorted(set(value) - self.value_set)
            missing = sorted(self.value_set - set(value))
            raise _mismatch(self.stage, f"value for key {key!r} has extra fields {extra} / lacks {missing}")
        return value[self.value_names[0]] if self.single_value else value

    def flush(self) -> None:
        if not self.targets:
            return
        stage = self.stage
        n_keys = len(stage.key)
        columns: dict[str, pa.Array] = {}
        if n_keys > 1:
            for t in self.targets:
                if not isinstance(t, (tuple, list)) or len(t) != n_keys:
                    raise _mismatch(
                        stage,
                        f"the target key {t!r} ({type(t).__name__}) is not a tuple of {n_keys} values "
                        f"({', '.join(stage.key.names)})",
                    )
        for j, f in enumerate(stage.key):
            vals = self.targets if n_keys == 1 else [t[j] for t in self.targets]
            try:
                columns[f.name] = from_python(vals, f.type)
            except Inexact as e:
                raise _inexact(stage, f.name, e) from None
        for f in stage.value:
            try:
                vals = self.values if self.single_value else [v[f.name] for v in self.values]
                arr = from_python(vals, f.type)
            except Inexact as e:
                raise _inexact(stage, f.name, e) from None
            if f.name in columns:
                same = pc.all(pc.equal(arr, columns[f.name])).as_py()
                if not same:
                    raise _mismatch(stage, f"value field {f.name!r} differs from the target key of that name")
            else:
                columns[f.name] = arr
        # The source keys: taken from the chunks' key batches (exact values).
        pieces = [batch.take(pa.array(idx, type=pa.uint32())) for batch, idx in self.segments if idx]
        src = pa.Table.from_batches(pieces).combine_chunks()
        arrays = []
        for f in self.schema:
            if f.name.startswith(SOURCE_PREFIX):
                # Chunk keys carry the (first) source's key names, in order.
                j = [SOURCE_PREFIX + n for n in _src_names(stage)].index(f.name)
                arrays.append(src.column(j).combine_chunks())
            else:
                arrays.append(columns[f.name])
        _push(stage, self.run, self.schema, arrays)
        # Emptied in place: emit_all holds these lists.
        self.targets.clear()
        self.values.clear()
        self.segments = []
        self.seg_keys, self.seg_index = None, []


def _src_names(stage: Node) -> list[str]:
    assert stage.source_key is not None
    return list(stage.source_key.names)


def _push(stage: Node, run: _core.StageRun, schema: pa.Schema, arrays: list[pa.Array]) -> None:
    for f, a in zip(schema, arrays, strict=True):
        if not f.nullable and a.null_count:
            raise _mismatch(stage, f"column {f.name!r} is not nullable but holds {a.null_count} nulls")
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    run.push(batch)


class _Groups:
    """The groups of one source, chunk by chunk; a group may go on over
    several chunks (``continued``). Values are single-use and forward-only."""

    def __init__(self, stage: Node, run: _core.StageRun, value_names: list[str]) -> None:
        self.stage = stage
        self.run = run
        self.value_names = value_names
        self.maker = _dict_maker(value_names)
        self.serial = 0  # bumps with every fetch
        self.pos = 0
        # keys, the chunk's rows, group offsets, continued, the keys as Python values
        self.cur: tuple[pa.RecordBatch, _ChunkRows, list[int], bool, list[Any] | None] | None = None
        self.current_group = -1
        self._fetch()

    def _fetch(self) -> bool:
        self.cur = None  # freed before the next chunk is read
        got = self.run.next_chunk(False, ROW_CHUNK)
        self.serial += 1
        if got is None:
            self.cur = None
            return False
        keys, sources, continued = got
        rows, offsets = sources[0]
        chunk = _ChunkRows(self.stage, rows.select(self.value_names), self.maker)
        self.cur = (keys, chunk, offsets, continued, None)
        self.pos = 1 if continued else 0
        return True

    def _values(self, group: int, i: int) -> Iterator[dict[str, Any]]:
        assert self.cur is not None
        keys, chunk, offsets, _, _ = self.cur
        for item in chunk.get(offsets[i], offsets[i + 1]):
            if self.current_group != group:
                raise RuntimeError("a value sequence was read after its Produce call ended (values are single-use)")
            yield item
        last = i == keys.num_rows - 1
        while last and self.current_group == group:
            del keys, chunk, offsets  # the chunk is freed before the next is read
            if not self._fetch() or self.cur is None:
                return
            keys, chunk, offsets, continued, _ = self.cur
            if not continued:
                return
            for item in chunk.get(offsets[0], offsets[1]):
                if self.current_group != group:
                    raise RuntimeError("a value sequence was read after its Produce call ended (values are single-use)")
                yield item
            last = keys.num_rows == 1

    def __iter__(self) -> Iterator[tuple[pa.RecordBatch, int, Any, Iterator[dict[str, Any]]]]:
        group = 0
        converted: pa.RecordBatch | None = None
        key_list: list[Any] | None = None
        while self.cur is not None:
            keys = self.cur[0]
            if self.pos >= keys.num_rows:
                if not self._fetch():
                    return
                continue
            i = self.pos
            self.pos += 1
            group += 1
            self.current_group = group
            if keys is not converted:
                converted, key_list = keys, _chunk_keys(self.stage, keys)
            key = key_list[i] if key_list is not None else _key_values(self.stage, keys.slice(i, 1))[0]
            yield keys, i, key, self._values(group, i)


def _call(stage: Node, key: Any, result: Any, emitter: _Emitter, keys: pa.RecordBatch, i: int) -> None:
    if result is None:
        return
    emitter.emit_all(result, keys, i, key)


def run_rows(stage: Node, run: _core.StageRun, n_sources: int, source_values: list[list[str]]) -> None:
    """The row form: ``fn(key, values...)`` per source key."""
    fn = stage.fn
    assert fn is not None
    emitter = _Emitter(stage, run)
    if n_sources == 1:
        for keys, i, key, values in _Groups(stage, run, source_values[0]):
            try:
                _call(stage, key, fn(key, values), emitter, keys, i)
            except (SchemaMismatch, DataError):
                raise  # a value that does not fit, from pds, not from Produce
            except Exception as e:
                raise produce_error(e, stage.name, key) from e
        emitter.flush()
        return
    makers = [_dict_maker(names) for names in source_values]
    while (got := run.next_chunk(True, JOIN_KEYS, JOIN_SIDE_ROWS)) is not None:
        keys, sources, _ = got
        key_list = _chunk_keys(stage, keys)
        chunks = [
            (_ChunkRows(stage, rows.select(names), maker), offs)
            for (rows, offs), names, maker in zip(sources, source_values, makers, strict=True)
        ]
        open_sources = set(run.open_sources())
        for i in range(keys.num_rows):
            key = key_list[i] if key_list is not None else _key_values(stage, keys.slice(i, 1))[0]
            per_source: list[Iterator[dict[str, Any]]] = [
                iter(chunk.get(offs[i], offs[i + 1])) for chunk, offs in chunks
            ]
            if open_sources and i == keys.num_rows - 1:
                # The key's other rows, pulled as the iterator reaches them.
                for j in open_sources:
                    rest = _pulled(stage, run, j, source_values[j], makers[j])
                    per_source[j] = itertools.chain(per_source[j], rest)
            try:
                _call(stage, key, fn(key, *per_source), emitter, keys, i)
            except (SchemaMismatch, DataError):
                raise  # a value that does not fit, from pds, not from Produce
            except Exception as e:
                raise produce_error(e, stage.name, key) from e
    emitter.flush()


def _pulled(stage: Node, run: _core.StageRun, source: int, names: list[str], maker: Any) -> Iterator[dict[str, Any]]:
    """The open key's rows of join source *source* not in its chunk, pulled
    a piece at a time as they are read."""
    while (more := run.pull_open(source, JOIN_SIDE_ROWS)) is not None:
        yield from _ChunkRows(stage, more.select(names), maker).get(0, more.num_rows)


def run_batched(stage: Node, run: _core.StageRun, n_sources: int) -> None:
    """The batched form: ``fn(table...)`` per chunk of whole groups. A
    join key with more than ``BATCH_GROUP_MAX`` rows on a source comes over
    several calls: its first rows (with the chunk's other keys), then that
    key alone, the next rows of each source that has more (the others'
    tables empty)."""
    fn = stage.fn
    assert fn is not None
    if n_sources == 1:
        while (got := run.next_chunk(True, BATCH_CHUNK)) is not None:
            keys, sources, _ = got
            _batched_call(stage, run, keys, [pa.Table.from_batches([rows]) for rows, _ in sources])
            # Drop this chunk before the next is read: a chunk can hold
            # BATCH_GROUP_MAX rows, and two at once would double that.
            del got, keys, sources
        return
    while (got := run.next_chunk(True, JOIN_KEYS, BATCH_GROUP_MAX)) is not None:
        keys, sources, _ = got
        del got
        _batched_call(stage, run, keys, [pa.Table.from_batches([rows]) for rows, _ in sources])
        schemas = [rows.schema for rows, _ in sources]
        # Each piece is dropped before the next is read (see above).
        del sources
        open_sources = run.open_sources()
        last = keys.slice(keys.num_rows - 1, 1)
        del keys
        while open_sources:
            tables = [schema.empty_table() for schema in schemas]
            for j in list(open_sources):
                more = run.pull_open(j, BATCH_GROUP_MAX)
                if more is None:
                    open_sources.remove(j)
                else:
                    tables[j] = pa.Table.from_batches([more])
                    del more
            if any(t.num_rows for t in tables):
                _batched_call(stage, run, last, tables)
            del tables


def _batched_call(stage: Node, run: _core.StageRun, keys: pa.RecordBatch, tables: list[pa.Table]) -> None:
    """One call of a batched ``Produce`` over the groups of *keys*: its
    output checked and pushed."""
    fn = stage.fn
    assert fn is not None
    schema = stage.physical_schema
    src_names = _src_names(stage)
    try:
        out = fn(*tables)
    except Exception as e:
        first = _key_values(stage, keys.slice(0, 1))[0]
        if keys.num_rows == 1:
            raise produce_error(e, stage.name, first) from e
        last = _key_values(stage, keys.slice(keys.num_rows - 1, 1))[0]
        raise produce_error(e, stage.name, first, last) from e
    if out is None:
        return
    if isinstance(out, pa.RecordBatch):
        out = pa.Table.from_batches([out])
    if not isinstance(out, pa.Table):
        raise _mismatch(stage, f"a batched Produce returns a pyarrow Table, got {type(out).__name__}")
    if out.num_rows == 0:
        return
    arrays = []
    missing = []
    for f in schema:
        name = f.name[len(SOURCE_PREFIX) :] if f.name.startswith(SOURCE_PREFIX) else f.name
        if name not in out.column_names:
            missing.append(name)
            continue
        try:
            arrays.append(conform(out.column(name), f.type))
        except Inexact as e:
            raise _inexact(stage, name, e) from None
    if missing:
        raise _mismatch(
            stage,
            f"missing columns {missing}; a batched Produce returns the target key, the value columns, "
            f"and the source key columns {src_names} (which source key produced each row)",
        )
    declared = {*stage.key.names, *stage.value.names, *src_names}
    extra = [c for c in out.column_names if c not in declared]
    if extra:
        raise _mismatch(
            stage,
            f"extra columns {extra}; a batched Produce returns only the target key {stage.key.names}, "
            f"the value columns {stage.value.names} and the source key columns {src_names}",
        )
    # Each row's source key must be one of this call's keys.
    src = [arrays[len(stage.key) + j] for j in range(len(src_names))]
    if len(src) == 1:
        inside = pc.is_in(src[0], value_set=keys.column(0))
        stray = pa.table({src_names[0]: src[0]}).filter(pc.invert(inside))
    else:
        given = pa.Table.from_batches([keys]).rename_columns(src_names)
        stray = pa.table(dict(zip(src_names, src, strict=True))).join(given, keys=src_names, join_type="left anti")
    if stray.num_rows:
        raise _mismatch(
            stage, f"rows name source keys that were not in this call's groups: {stray.slice(0, 3).to_pylist()}"
        )
    _push(stage, run, schema, arrays)
