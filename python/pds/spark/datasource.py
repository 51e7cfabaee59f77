"""The ``pds`` data source for PySpark 4's Python Data Source API.

Writing::

    (df.write.format("pds")
       .option("store", "s3://bucket/lake")          # or file:///abs/dir
       .option("endpoint", "...")                    # storage options
       .option("compression", "zstd")                # pds options
       .mode("append")                               # create; "overwrite" replaces
       .save("sales/2024"))

Reading::

    spark.read.format("pds").option("store", "s3://bucket/lake").load("sales/2024")

Each write task receives Arrow batches straight from Spark
(``DataSourceArrowWriter``) and uploads Parquet parts through the Rust
core; the driver commits ``manifest.json`` and ``_SUCCESS`` only after
every task succeeded (see :mod:`pds.spark._job` for the retry rules). Each
read task reads one part, only the columns the schema names.

``format("pds")`` needs no registration: the ``pyspark_pds`` module exposes
this class as ``DefaultSource``. :func:`pds.spark.register` registers it
explicitly.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pyarrow as pa

from pds.spark._version import require_data_source_api

try:
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceReader,
        DataSourceWriter,
        InputPartition,
        WriterCommitMessage,
    )
except ImportError:  # PySpark < 4.0: say so, and name the helpers that work there
    require_data_source_api('format("pds") (pds.spark.PdsDataSource)')
    raise
from pyspark.sql.types import StructType
from remote_store import Store

from pds import _core
from pds.spark._job import (
    TaskParts,
    WriteJob,
    WriteSettings,
    dataset_key_from_options,
    pickle_secrets_option,
    store_from_options,
)
from pds.spark._pipeline_read import PdsPipelineReader, pipeline_options, pipeline_snapshot
from pds.spark._schema import arrow_to_spark, spark_read_target, spark_to_arrow
from pds.spark._snapshot import Snapshot, dataset_snapshot, project
from pds.spark._table_job import (
    TableFiles,
    TableSettings,
    TableWriteJob,
    is_table,
    schema_mode_option,
    table_snapshot_files,
    version_options,
)
from pds.spark.filters import (
    FilterTuple,
    filter_columns,
    filter_expression,
    filters_from_json,
    split_for_core,
    translate_filter,
)
from pds.table import Table

if TYPE_CHECKING:
    from pyspark.sql.datasource import Filter  # PySpark >= 4.1

__all__ = [
    "PdsCommitMessage",
    "PdsDataSource",
    "PdsPartition",
    "PdsPushdownReader",
    "PdsReader",
    "PdsWriter",
    "Snapshot",
    "dataset_snapshot",
    "project",
]

_BATCH_ROWS = 65_536
_SPLIT_BELOW = 8
"""``splitRowGroups=auto`` splits row groups when a dataset has fewer non-empty parts than this."""
_FOOTER_THREADS = 8
_TRUE = ("true", "1", "yes")


# -- reading ------------------------------------------------------------------------


def _columns_option(options: Mapping[str, str]) -> list[str] | None:
    """The ``columns`` option: a JSON list of names, or names separated by commas."""
    raw = options.get("columns")
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"option 'columns' is not a JSON list: {exc}") from None
        if not isinstance(parsed, list) or not all(isinstance(c, str) for c in parsed):
            raise ValueError("option 'columns' must be a JSON list of column names")
        return parsed
    return [c.strip() for c in text.split(",")]


def _check_castable(source: pa.Schema, target: pa.Schema) -> None:
    """Fail on the driver if a requested column's type cannot come from the dataset's.

    Raises:
        ValueError: the column is missing or its type cannot be cast.
    """
    for field in target:
        index = source.get_field_index(field.name)
        if index < 0:
            raise ValueError(f"the schema asks for column {field.name!r}; the dataset has {source.names}")
        src = source.field(index).type
        if src != field.type:
            try:
                pa.array([], type=src).cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise ValueError(
                    f"column {field.name!r} is {src} in the dataset; cannot read it as {field.type}: {exc}"
                ) from None


class PdsPartition(InputPartition):
    """One part file of the dataset (``key``: its backend-relative key), or
    some of its row groups (``row_groups``: indices in file order)."""

    def __init__(self, key: str, row_count: int | None, row_groups: tuple[int, ...] | None = None) -> None:
        super().__init__(key)
        self.key = key
        self.row_count = row_count
        self.row_groups = row_groups


def _split_option(options: Mapping[str, str]) -> str:
    """The ``splitRowGroups`` option: ``auto`` (default), ``true`` or ``false``.

    Raises:
        ValueError: another value.
    """
    value = str(options.get("splitrowgroups", "auto")).strip().lower()
    if value not in ("auto", "true", "false"):
        raise ValueError(f"option 'splitRowGroups' must be auto, true or false, got {value!r}")
    return value


class PdsReader(DataSourceReader):
    """Reads a committed dataset: one input partition per non-empty part, or
    per row group when the dataset has few parts.

    With ``splitRowGroups`` ``auto`` (the default), a dataset of fewer than
    8 non-empty parts is read one row group per partition (the driver reads
    those parts' footers), so a single large part still spreads over the
    cluster; ``true`` always splits, ``false`` never does.

    Each task fetches its part's footer and only the columns of the Spark
    schema; the Rust core skips the row groups the filters rule out by their
    statistics and filters rows as it decodes (conditions on floating
    columns are applied with pyarrow afterwards, see
    :func:`pds.spark.filters.split_for_core`). The batches returned have
    exactly the Arrow schema Spark expects.
    """

    def __init__(
        self,
        store: Store,
        snapshot: Snapshot,
        schema: StructType,
        filters: Sequence[FilterTuple],
        split: str = "auto",
    ) -> None:
        self._store = store
        self._dataset_schema = snapshot.schema
        self._target = spark_read_target(schema)
        _check_castable(snapshot.schema, self._target)
        self._filters: list[FilterTuple] = list(filters)
        info = snapshot.manifest.part_info
        rows: list[int | None] = (
            [p.row_count for p in info] if info is not None else [None] * len(snapshot.manifest.parts)
        )
        parts = [
            (f"{snapshot.location}/{name}", n) for name, n in zip(snapshot.manifest.parts, rows, strict=True) if n != 0
        ]
        if split == "true" or (split == "auto" and len(parts) < _SPLIT_BELOW):
            self._partitions = self._row_group_partitions(parts)
        else:
            self._partitions = [PdsPartition(key, n) for key, n in parts]

    def _row_group_partitions(self, parts: Sequence[tuple[str, int | None]]) -> list[PdsPartition]:
        """One partition per non-empty row group of each part (footers read concurrently)."""
        if not parts:
            return []
        rust: _core.RustStore = self._store.unwrap(_core.RustStore)
        with ThreadPoolExecutor(max_workers=min(_FOOTER_THREADS, len(parts))) as pool:
            layouts = list(pool.map(lambda p: _core.part_row_groups(rust, p[0]), parts))
        out: list[PdsPartition] = []
        for (key, rows), groups in zip(parts, layouts, strict=True):
            if len(groups) <= 1:
                out.append(PdsPartition(key, rows))
                continue
            out.extend(PdsPartition(key, n, (i,)) for i, n in enumerate(groups) if n)
        return out

    @property
    def filters(self) -> list[FilterTuple]:
        """The filter tuples every task applies (from the option and from Spark)."""
        return list(self._filters)

    def partitions(self) -> list[InputPartition]:
        """One partition per part that holds rows (all parts if the manifest has no row counts)."""
        return list(self._partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Yield the rows of one part as Arrow batches of Spark's expected schema.

        The part is streamed: the Rust core decodes the next batches in the
        background while Spark consumes this one.

        Raises:
            NotFound / PartCorrupted: the part is missing, or its footer is
                unreadable (checked before the first batch).
            PartCorrupted: a part whose schema differs from the dataset's, or
                a column chunk found corrupt mid-stream (names the part).
            pyarrow.ArrowInvalid: a value the requested type cannot hold.
        """
        if not isinstance(partition, PdsPartition):
            return  # Spark's placeholder partition for a dataset without rows
        names = self._target.names
        core, residual = split_for_core(self._filters, self._dataset_schema)
        extra = [c for c in filter_columns(residual) if c not in names]
        rust: _core.RustStore = self._store.unwrap(_core.RustStore)
        reader = _core.scan_part(
            rust,
            partition.key,
            columns=[*names, *extra],
            filter=core or None,
            batch_size=_BATCH_ROWS,
            row_groups=partition.row_groups,
            schema=self._dataset_schema,
        )
        yield from _finish(reader, residual, names, extra, self._target)


def _finish(
    reader: pa.RecordBatchReader,
    residual: Sequence[FilterTuple],
    names: Sequence[str],
    extra: Sequence[str],
    target: pa.Schema,
) -> Iterator[pa.RecordBatch]:
    """Batches of *reader* with the *residual* filters applied, the *extra*
    filter columns dropped, cast to *target*; empty batches skipped."""
    try:
        expression = filter_expression(list(residual), reader.schema) if residual else None
        decoded = pa.schema([reader.schema.field(n) for n in names])
        cast = not decoded.equals(target)
        for batch in reader:
            if expression is None and not extra and not cast:
                if batch.num_rows:
                    yield batch
                continue
            # Table methods: RecordBatch.filter/cast need newer pyarrow than pds requires.
            table = pa.Table.from_batches([batch])
            if expression is not None:
                table = table.filter(expression)
            if extra:
                table = table.select(list(names))
            if cast:
                table = table.cast(target)
            for out in table.to_batches():
                if out.num_rows:
                    yield out
    finally:
        reader.close()  # stops the background decoder if Spark stops early (LIMIT)


class PdsTableReader(DataSourceReader):
    """Reads one version of a pds table with its deletes applied: one input
    partition per data file that holds rows. Each task reads its file's
    footer, the tombstones that touch it, and only the columns of the Spark
    schema (the filters prune row groups and rows as in :class:`PdsReader`).
    """

    def __init__(self, store: Store, table: Table, schema: StructType, filters: Sequence[FilterTuple]) -> None:
        self._store = store
        self._location = str(store.native_path(table.key))
        self._version = table.version
        self._table_schema = table.schema
        self._target = spark_read_target(schema)
        _check_castable(self._table_schema, self._target)
        self._filters = list(filters)
        self._partitions = [PdsPartition(path, rows) for path, rows in table_snapshot_files(table)]

    def partitions(self) -> list[InputPartition]:
        """One partition per data file of the version that holds rows."""
        return list(self._partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Yield the live rows of one data file as batches of Spark's schema."""
        if not isinstance(partition, PdsPartition):
            return
        names = self._target.names
        core, residual = split_for_core(self._filters, self._table_schema)
        extra = [c for c in filter_columns(residual) if c not in names]
        rust: _core.RustStore = self._store.unwrap(_core.RustStore)
        reader = _core.table_scan(
            rust,
            self._location,
            version=self._version,
            columns=[*names, *extra],
            filter=core or None,
            batch_size=_BATCH_ROWS,
            parallelism=1,
            files=[partition.key],
        )
        yield from _finish(reader, residual, names, extra, self._target)


class PdsPushdownReader(PdsReader):
    """A :class:`PdsReader` that also takes the filters Spark pushes down.

    Used with ``.option("pushFilters", "true")``, which needs the Spark conf
    ``spark.sql.python.filterPushdown.enabled=true`` (PySpark refuses a
    reader with ``pushFilters`` otherwise).
    """

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Keep the filters :func:`translate_filter` accepts; return the rest to Spark."""
        rejected: list[Filter] = []
        for f in filters:
            item = translate_filter(f, self._dataset_schema)
            if item is None:
                rejected.append(f)
            else:
                self._filters.append(item)
        return rejected


# -- writing ------------------------------------------------------------------------


@dataclasses.dataclass
class PdsCommitMessage(WriterCommitMessage):
    """What one write task tells the driver: the parts its attempt wrote."""

    task: TaskParts


@dataclasses.dataclass
class PdsTableCommitMessage(WriterCommitMessage):
    """What one table write task tells the driver: the files its attempt wrote."""

    files: TableFiles


class PdsTableWriter(DataSourceArrowWriter):
    """Writes a DataFrame into a pds table in one commit; see :mod:`pds.spark._table_job`."""

    def __init__(self, job: TableWriteJob) -> None:
        self._job = job

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PdsTableCommitMessage:
        """Upload this task's rows as uncommitted data files (executor side)."""
        return PdsTableCommitMessage(self._job.write_task(iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Commit every successful attempt's files in one version (driver side)."""
        results: list[TableFiles] = []
        for m in messages:
            if not isinstance(m, PdsTableCommitMessage):
                raise RuntimeError(f"pds commit got {type(m).__name__} instead of a task's PdsTableCommitMessage")
            results.append(m.files)
        self._job.commit(results)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Remove every file of this job; commit nothing."""
        self._job.abort(m.files for m in messages if isinstance(m, PdsTableCommitMessage))


class PdsWriter(DataSourceArrowWriter):
    """Writes a DataFrame as one pds dataset; see :class:`pds.spark._job.WriteJob`."""

    def __init__(self, job: WriteJob) -> None:
        self._job = job

    @property
    def job(self) -> WriteJob:
        """The write job (store, key, schema, settings, job id)."""
        return self._job

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PdsCommitMessage:
        """Upload this task's rows as uncommitted parts (executor side).

        Raises:
            DataError: the input failed mid-stream (this call's parts are removed).
        """
        return PdsCommitMessage(self._job.write_task(iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Write ``manifest.json`` and ``_SUCCESS`` for the successful attempts (driver side).

        Raises:
            RuntimeError: a message is missing or of another writer.
            AlreadyExists / DatasetIncomplete: as ``WriteJob.commit``.
        """
        results: list[TaskParts] = []
        for m in messages:
            if not isinstance(m, PdsCommitMessage):
                raise RuntimeError(f"pds commit got {type(m).__name__} instead of a task's PdsCommitMessage")
            results.append(m.task)
        self._job.commit(results)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Remove every part of this job; write no manifest and no ``_SUCCESS``."""
        self._job.abort(m.task for m in messages if isinstance(m, PdsCommitMessage))


# -- the data source ------------------------------------------------------------------


class PdsDataSource(DataSource):
    """``format("pds")``: pds datasets in Spark; see the module docstring.

    Options (case-insensitive):

    - ``store`` (required): ``file:///abs/dir``, ``s3://bucket[/prefix]``,
      ``gs://bucket[/prefix]``, ``az://container[/prefix]`` (any URL
      :class:`pds.ObjectStoreBackend` opens but ``memory://``).
    - writing: ``compression``, ``row_group_size``, ``max_rows_per_file``,
      ``run_id``, ``metadata`` (a JSON object of strings), ``parallelism``;
      tables: ``table`` (``true`` to create one), ``primary_key``,
      ``target_file_size``, ``schema_mode`` (``strict``, the default: an
      append has the table's columns; ``merge``: an append may add columns
      and widen types, the table's schema changes in the same version, as
      ``pds.Table.append(..., schema_mode="merge")``).
    - reading: ``columns`` (JSON list or comma-separated names),
      ``filters`` (JSON ``[[column, op, value], ...]``, see
      :mod:`pds.spark.filters`), ``pushFilters`` (``true`` to take Spark's
      pushed-down filters; needs ``spark.sql.python.filterPushdown.enabled``),
      ``splitRowGroups`` (``auto``: one partition per row group when the
      dataset has fewer than 8 parts; ``true``; ``false``: one per part).
    - pipelines (read only): ``pipeline`` (the pipeline's key, with
      ``load()`` and no path), ``stage`` (the stage, source or merge to
      read), ``version`` (default: the latest); one input partition per
      stored key-range part.
    - any other option is a storage option for :class:`pds.ObjectStoreBackend`
      (S3: ``endpoint``, ``region``, ``access_key_id``, ``secret_access_key``,
      ``session_token``, ``aws_*``; GCS: ``service_account_key``, ``token``,
      ``google_*``; Azure: ``account``, ``account_key``, ``sas``,
      ``connection_string``, ``azure_*``; ``allow_http`` ...). Spark's plans
      do not show them.
    - ``pickle_secrets`` (``true`` by default; ``false``): whether what the
      tasks carry holds the credential options (secrets and
      ``access_key_id``). With ``false``, the driver opens the store with
      them, and a read's tasks (the pickled reader, its store, and this
      source, which PySpark's read function also carries) carry none: the
      executors take their credentials from their own environment. Spark
      itself keeps every ``.option`` in the driver's query plan, and hands
      them to the Python workers that plan the query on the driver. A
      *write* with ``false`` and credential options is refused
      (``ValueError``): PySpark hands the driver's commit the same pickled
      writer as the tasks, so the commit would have no keys either; leave
      the keys out of the options, or use :func:`pds.spark.write_dataset`.

    Save modes: ``append`` creates the dataset and raises ``AlreadyExists``
    if one exists (datasets are write-once); ``overwrite`` replaces it.
    """

    @classmethod
    def name(cls) -> str:
        """``"pds"``."""
        return "pds"

    def __getstate__(self) -> dict[str, object]:
        """This source as pickled. Once it made a reader, PySpark pickles it
        into the read tasks (with the reader); with ``pickle_secrets`` false
        that copy leaves the credential options out. Before that (PySpark
        hands the source from the worker that made it to the one that plans
        the read, both on the driver), every option travels."""
        state = dict(self.__dict__)
        planned = state.pop("_tasks_next", False)
        if planned and not pickle_secrets_option(self.options):
            options = copy.copy(self.options)
            for key in [k for k in options if _core.is_credential_option(k)]:
                del options[key]
            state["options"] = options
        return state

    def schema(self) -> StructType:
        """The dataset's Spark schema, from its manifest (the ``columns`` option projects it).

        Raises:
            ValueError: a missing ``store`` / key, a bad option, an unknown column.
            DatasetIncomplete: no committed dataset at the key.
        """
        store = store_from_options(self.options)
        pipeline = pipeline_options(self.options)
        if pipeline is not None:
            return arrow_to_spark(pipeline_snapshot(store, *pipeline).schema)
        key = dataset_key_from_options(self.options)
        table = self._table(store, key)
        if table is not None:
            return arrow_to_spark(project(table.schema, _columns_option(self.options)))
        snapshot = dataset_snapshot(store, key)
        return arrow_to_spark(project(snapshot.schema, _columns_option(self.options)))

    def _table(self, store: Store, key: str) -> Table | None:
        """The table at *key* pinned to the version the options name
        (``versionAsOf``, ``timestampAsOf``, else the latest), or ``None``
        for a dataset.

        Raises:
            ValueError: a version option on a key that holds no table.
        """
        version, stamp = version_options(self.options)
        if not is_table(store, key):
            if version is not None or stamp is not None:
                raise ValueError(f"versionAsOf / timestampAsOf read tables; {key!r} holds no pds table")
            return None
        table = Table.open(store, key)
        if stamp is not None:
            return table.at(as_of=stamp)
        return table.at(version=version)

    def reader(self, schema: StructType) -> DataSourceReader:
        """A reader of the dataset's current commit for the columns of *schema*.

        Reads the manifest again, so each query sees the latest commit.

        Raises:
            DatasetIncomplete: no committed dataset at the key.
            ValueError: a column of *schema* the dataset lacks or cannot cast
                to; a bad ``filters`` option.
        """
        store = store_from_options(self.options)
        self._tasks_next = True  # this source is next pickled into the read tasks
        pipeline = pipeline_options(self.options)
        if pipeline is not None:
            return PdsPipelineReader(store, pipeline_snapshot(store, *pipeline), schema)
        key = dataset_key_from_options(self.options)
        table = self._table(store, key)
        if table is not None:
            raw = self.options.get("filters")
            table_filters = filters_from_json(raw, table.schema) if raw else []
            return PdsTableReader(store, table, schema, table_filters)
        snapshot = dataset_snapshot(store, key)
        raw_filters = self.options.get("filters")
        filters = filters_from_json(raw_filters, snapshot.schema) if raw_filters else []
        push = str(self.options.get("pushfilters", "false")).strip().lower() in _TRUE
        cls = PdsPushdownReader if push else PdsReader
        return cls(store, snapshot, schema, filters, _split_option(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """A writer for ``save(key)``; runs on the driver before any task.

        Raises:
            ValueError: a missing ``store`` / key, a bad option (a
                ``schema_mode`` other than strict or merge; merge on a
                dataset), duplicate column names.
            SchemaMismatch: a table append whose columns are not the
                table's (in ``schema_mode`` merge: neither fit nor widen).
            AlreadyExists: mode ``append`` and a dataset exists at the key,
                or another writer holds it (its ``_WRITING`` claim); or a
                table or pipeline (dataset or pipeline, for a table write)
                is at the key, or a dataset, table or pipeline lies at an
                ancestor of the key or below it (keys are exclusive).
        """
        if self.options.get("pipeline") is not None:
            raise ValueError(
                'pipelines are not written through format("pds"): update them with pds.Pipeline.update '
                "or pds.spark.update_pipeline"
            )
        keys = sorted(k for k in self.options if _core.is_credential_option(k))
        if keys and not pickle_secrets_option(self.options):
            raise ValueError(
                f"option pickle_secrets=false with credential options ({', '.join(keys)}) cannot apply to a "
                'format("pds") write: PySpark hands the driver\'s commit the same pickled writer as the tasks, '
                "so the commit would have no keys either. Leave the keys out of the options (the driver and the "
                "executors then take theirs from their own environment), or use "
                "pds.spark.write_dataset(..., pickle_secrets=False), which commits in this process"
            )
        schema_mode = schema_mode_option(self.options)
        store = store_from_options(self.options)
        key = dataset_key_from_options(self.options)
        if str(self.options.get("table", "false")).strip().lower() in _TRUE or is_table(store, key):
            table_job = TableWriteJob.start(
                store, key, spark_to_arrow(schema), TableSettings.from_options(self.options), overwrite=overwrite
            )
            return PdsTableWriter(table_job)
        if schema_mode == "merge":
            raise ValueError(
                f"option 'schema_mode' merge adds columns to a table on append; {key!r} holds no table "
                '(a dataset is written once): write a table (.option("table", "true")), or replace the dataset '
                "with mode 'overwrite'"
            )
        settings = WriteSettings.from_options(self.options)
        job = WriteJob.start(store, key, spark_to_arrow(schema), settings, overwrite=overwrite)
        return PdsWriter(job)
