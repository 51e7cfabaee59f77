"""pds.dagster: real ``dagster.materialize`` runs, no mocked contexts, on
memory, file, SeaweedFS S3 and the GCS emulator (issue K)."""

import datetime
import uuid
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
from store_kinds import lake_url

import pds
from pds.dagster import PdsIOManager, PdsResource

DAILY = dg.DailyPartitionsDefinition(start_date="2026-01-01", end_date="2026-02-01")
REGIONS = dg.StaticPartitionsDefinition(["eu", "us", "apac"])
TABLE = {"pds/format": "table"}


@pytest.fixture(params=["memory", "file", "s3", "gcs"])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    """A fresh root URL and its options on each store kind."""
    if request.param == "memory":
        return f"memory://{uuid.uuid4().hex}", {}
    return lake_url(request.param, tmp_path, request)


def run(
    assets: list[Any], lake: tuple[str, dict[str, str]], *, partition: str | None = None, ok: bool = True, **kw: Any
) -> dg.ExecuteInProcessResult:
    url, options = lake
    result = dg.materialize(
        assets,
        resources={"io_manager": PdsIOManager(root_uri=url, storage_options=options), **kw.pop("resources", {})},
        partition_key=partition,
        raise_on_error=False,
        **kw,
    )
    if ok and not result.success:
        raise AssertionError(_failure(result))
    return result


def _failure(result: dg.ExecuteInProcessResult) -> str:
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data is not None:
            error, messages = event.step_failure_data.error, []
            while error is not None:  # the error and its causes
                messages.append(f"{error.cls_name}: {error.message}")
                error = error.cause
            return "\n".join(messages)
    return "run failed"


def metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict[str, Any]:
    (event,) = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == asset]
    return {k: getattr(v, "value", v) for k, v in event.materialization.metadata.items()}


def store_of(lake: tuple[str, dict[str, str]]) -> Any:
    from pds.dagster._stores import shared_store

    return shared_store(*lake)


def day_rows(key: str, n: int = 3, scale: float = 1.0) -> pa.Table:
    d = datetime.date.fromisoformat(key)
    return pa.table(
        {
            "day": pa.array([d] * n, pa.date32()),
            "order_id": [f"{key}-{i}" for i in range(n)],
            "amount": [scale * (i + 1) for i in range(n)],
        }
    )


# -- datasets ------------------------------------------------------------------


def test_datasets_round_trip_on_every_store(lake: tuple[str, dict[str, str]]) -> None:
    @dg.asset(key_prefix=["sales"])
    def raw() -> pa.Table:
        return pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"]})

    @dg.asset(partitions_def=DAILY, key_prefix=["sales"])
    def daily(context: dg.AssetExecutionContext) -> pl.DataFrame:
        return pl.DataFrame({"day": [context.partition_key], "n": [len(context.partition_key)]})

    seen: dict[str, Any] = {}

    @dg.asset(ins={"raw": dg.AssetIn(key=["sales", "raw"], metadata={"columns": ["b"], "pds/filter": [("a", ">", 1)]})})
    def use(raw: pd.DataFrame) -> None:
        seen["raw"] = raw

    result = run([raw, use], lake)
    assert seen["raw"]["b"].tolist() == ["y", "z"]
    meta = metadata(result, "sales/raw")
    assert meta["dagster/row_count"] == 3
    assert meta["dagster/uri"] == f"{lake[0]}/sales/raw"
    assert [c.name for c in meta["dagster/column_schema"].columns] == ["a", "b"]
    run([daily], lake, partition="2026-01-05")
    # remote-store's layout: <key>/<partition_key>
    got = pds.ParquetDatasetStore(store_of(lake)).read_dataset("sales/daily/2026-01-05")
    assert got.to_pylist() == [{"day": "2026-01-05", "n": 10}]


# -- tables: daily partitions --------------------------------------------------


@dg.asset(partitions_def=DAILY, metadata={**TABLE, "partition_expr": "day"})
def orders(context: dg.AssetExecutionContext) -> pa.Table:
    scale = float(context.run.tags.get("scale", "1"))
    return day_rows(context.partition_key, scale=scale)


def test_daily_table_replaces_one_partition_in_one_commit(lake: tuple[str, dict[str, str]]) -> None:
    for day in ("2026-01-01", "2026-01-02"):
        run([orders], lake, partition=day)
    table = pds.Table.open(store_of(lake), "orders")
    before = table.version
    result = run([orders], lake, partition="2026-01-01", tags={"scale": "10"})
    table.refresh()
    assert table.version == before + 1, "a re-materialisation is exactly one version"
    assert table.history(limit=1)[0]["operation"] == "replace"
    rows = table.to_arrow().sort_by("order_id").to_pylist()
    assert [r["amount"] for r in rows] == [10.0, 20.0, 30.0, 1.0, 2.0, 3.0]
    meta = metadata(result, "orders")
    assert meta["pds/version"] == table.version
    assert meta["pds/commit_id"] == table.history(limit=1)[0]["commit_id"]
    assert meta["dagster/row_count"] == 3
    assert meta["dagster/uri"] == f"{lake[0]}/orders"


def test_partition_columns_of_each_type(file_lake: tuple[str, dict[str, str]]) -> None:
    zurich = dg.DailyPartitionsDefinition(start_date="2026-01-01", timezone="Europe/Zurich")

    @dg.asset(partitions_def=zurich, metadata={**TABLE, "partition_expr": "at"})
    def events(context: dg.AssetExecutionContext) -> pa.Table:
        start = context.partition_time_window.start  # midnight in Zurich
        times = [start + datetime.timedelta(hours=h) for h in (0, 12, 23)]
        return pa.table({"at": pa.array(times, pa.timestamp("us", "UTC")), "v": [1, 2, 3]})

    @dg.asset(partitions_def=DAILY, metadata={**TABLE, "partition_expr": "day"})
    def labels(context: dg.AssetExecutionContext) -> pa.Table:
        return pa.table({"day": [context.partition_key], "v": [1]})

    for day in ("2026-01-03", "2026-01-04"):
        run([events], file_lake, partition=day)
        run([labels], file_lake, partition=day)
    run([events], file_lake, partition="2026-01-03")
    run([labels], file_lake, partition="2026-01-03")
    ev = pds.Table.open(store_of(file_lake), "events").to_arrow()
    # 2026-01-03T00:00+01:00 is 2026-01-02T23:00Z: the window is honoured in Zurich time.
    assert ev.num_rows == 6
    assert min(ev.column("at").to_pylist()) == datetime.datetime(2026, 1, 2, 23, tzinfo=datetime.UTC)
    lab = pds.Table.open(store_of(file_lake), "labels").to_arrow()
    assert sorted(lab.column("day").to_pylist()) == ["2026-01-03", "2026-01-04"]


# -- tables: static partitions, checked keys and rows --------------------------


def test_static_partitions_and_checked_keys(file_lake: tuple[str, dict[str, str]]) -> None:
    @dg.asset(partitions_def=REGIONS, metadata={**TABLE, "partition_expr": "region"})
    def sales(context: dg.AssetExecutionContext) -> pa.Table:
        region = context.run.tags.get("region", context.partition_key)
        return pa.table({"region": [region] * 2, "amount": [1, 2]})

    run([sales], file_lake, partition="eu")
    run([sales], file_lake, partition="us")
    run([sales], file_lake, partition="eu")
    table = pds.Table.open(store_of(file_lake), "sales")
    assert sorted(table.to_arrow().column("region").to_pylist()) == ["eu", "eu", "us", "us"]
    version = table.version
    # Rows outside the partition are refused, naming a row; nothing commits.
    bad = run([sales], file_lake, partition="eu", tags={"region": "us"}, ok=False)
    assert "row 0 of the output lies outside partition eu" in _failure(bad)
    assert "OutsidePartition" in _failure(bad)
    assert table.refresh() == version

    # A key that does not parse as the column's type: a clear error, no write.
    ids = dg.StaticPartitionsDefinition(["1", "2", "x"])

    @dg.asset(partitions_def=ids, metadata={**TABLE, "partition_expr": "shop"})
    def shops(context: dg.AssetExecutionContext) -> pa.Table:
        key = context.partition_key
        return pa.table({"shop": pa.array([int(key) if key.isdigit() else 0], pa.int32()), "v": [1]})

    run([shops], file_lake, partition="1")
    shop_table = pds.Table.open(store_of(file_lake), "shops")
    bad = run([shops], file_lake, partition="x", ok=False)
    assert "partition key 'x' does not parse as partition column 'shop'" in _failure(bad)
    assert shop_table.refresh() == 0
    assert shop_table.to_arrow().num_rows == 1


# -- multi-partitions, streamed outputs and inputs -----------------------------


MULTI = dg.MultiPartitionsDefinition({"date": DAILY, "region": REGIONS})


@dg.asset(partitions_def=MULTI, metadata={**TABLE, "partition_expr": {"date": "day", "region": "region"}})
def regional(context: dg.AssetExecutionContext) -> pa.RecordBatchReader:
    keys = context.partition_key.keys_by_dimension
    d = datetime.date.fromisoformat(keys["date"])
    schema = pa.schema([("day", pa.date32()), ("region", pa.string()), ("n", pa.int64())])

    def batches() -> Any:  # streamed: never collected
        for i in range(3):
            yield pa.record_batch([[d], [keys["region"]], [i]], schema=schema)

    return pa.RecordBatchReader.from_batches(schema, batches())


@pytest.mark.filterwarnings("ignore::dagster.BetaWarning")  # MultiToSingleDimensionPartitionMapping
def test_multi_partition_input_and_streamed_output(lake: tuple[str, dict[str, str]]) -> None:
    for day in ("2026-01-01", "2026-01-02", "2026-01-03"):
        for region in ("eu", "us"):
            run([regional], lake, partition=dg.MultiPartitionKey({"date": day, "region": region}))
    seen: dict[str, Any] = {}

    @dg.asset(
        partitions_def=DAILY,
        ins={"regional": dg.AssetIn(partition_mapping=dg.MultiToSingleDimensionPartitionMapping("date"))},
    )
    def per_day(context: dg.AssetExecutionContext, regional: pa.RecordBatchReader) -> None:
        seen[context.partition_key] = regional.read_all()

    run([regional, per_day], lake, partition="2026-01-02", selection=[per_day])
    got = seen["2026-01-02"]
    assert sorted(got.column("region").to_pylist()) == ["eu"] * 3 + ["us"] * 3
    assert set(got.column("day").to_pylist()) == {datetime.date(2026, 1, 2)}

    # Not one rectangle of keys: the scan is exact all the same.
    @dg.asset(
        ins={
            "regional": dg.AssetIn(
                partition_mapping=dg.SpecificPartitionsPartitionMapping(
                    [
                        dg.MultiPartitionKey({"date": "2026-01-01", "region": "eu"}),
                        dg.MultiPartitionKey({"date": "2026-01-03", "region": "us"}),
                    ]
                )
            )
        }
    )
    def some(regional: pl.DataFrame) -> None:
        seen["some"] = regional

    run([regional, some], lake, selection=[some])
    pairs = {(r["day"].isoformat(), r["region"]) for r in seen["some"].to_dicts()}
    assert pairs == {("2026-01-01", "eu"), ("2026-01-03", "us")}
    assert seen["some"].height == 6


def test_several_dataset_partitions_load_as_a_dict(file_lake: tuple[str, dict[str, str]]) -> None:
    @dg.asset(partitions_def=DAILY)
    def counts(context: dg.AssetExecutionContext) -> pa.Table:
        return pa.table({"day": [context.partition_key]})

    seen: dict[str, Any] = {}

    @dg.asset(
        partitions_def=DAILY,
        ins={"counts": dg.AssetIn(partition_mapping=dg.TimeWindowPartitionMapping(start_offset=-1))},
    )
    def rolling(counts: dict[str, pl.DataFrame]) -> None:
        seen.update(counts)

    for day in ("2026-01-01", "2026-01-02"):
        run([counts], file_lake, partition=day)
    run([counts, rolling], file_lake, partition="2026-01-02", selection=[rolling])
    assert {k: v["day"].to_list() for k, v in seen.items()} == {
        "2026-01-01": ["2026-01-01"],
        "2026-01-02": ["2026-01-02"],
    }


# -- upsert, append, time travel and filters -----------------------------------


def test_upsert_time_travel_and_filter_inputs(file_lake: tuple[str, dict[str, str]]) -> None:
    @dg.asset(metadata={**TABLE, "pds/write_mode": "upsert", "pds/primary_key": "id"})
    def customers(context: dg.AssetExecutionContext) -> pa.Table:
        if context.run.tags.get("batch") == "2":
            return pa.table({"id": [2, 3], "name": ["B", "c"]})
        return pa.table({"id": [1, 2], "name": ["a", "b"]})

    run([customers], file_lake)
    run([customers], file_lake, tags={"batch": "2"})
    table = pds.Table.open(store_of(file_lake), "customers")
    assert sorted(table.to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "name": "a"},
        {"id": 2, "name": "B"},
        {"id": 3, "name": "c"},
    ]
    seen: dict[str, Any] = {}

    @dg.asset(ins={"customers": dg.AssetIn(metadata={"pds/version": 0})})
    def first(customers: pa.Table) -> None:
        seen["first"] = customers

    @dg.asset(ins={"customers": dg.AssetIn(metadata={"pds/filter": [("id", ">=", 2)], "columns": ["name"]})})
    def later(customers: pl.LazyFrame) -> None:
        seen["later"] = customers.collect()

    run([customers, first, later], file_lake, selection=[first, later])
    assert sorted(seen["first"].column("name").to_pylist()) == ["a", "b"]
    assert seen["later"].columns == ["name"]
    assert sorted(seen["later"]["name"].to_list()) == ["B", "c"]

    @dg.asset(metadata={**TABLE, "pds/write_mode": "upsert"})
    def nokey() -> pa.Table:
        return pa.table({"id": [1]})

    bad = run([nokey], file_lake, ok=False)
    assert "pds/primary_key" in _failure(bad)


def test_append_mode(file_lake: tuple[str, dict[str, str]]) -> None:
    @dg.asset(metadata={**TABLE, "pds/write_mode": "append"})
    def log() -> pd.DataFrame:
        return pd.DataFrame({"x": [1, 2]})

    run([log], file_lake)
    result = run([log], file_lake)
    assert pds.Table.open(store_of(file_lake), "log").to_arrow().num_rows == 4
    assert metadata(result, "log")["pds/version"] == 1


# -- failures change nothing ---------------------------------------------------


def test_failed_materialisations_change_nothing(lake: tuple[str, dict[str, str]]) -> None:
    @dg.asset(partitions_def=DAILY, metadata={**TABLE, "partition_expr": "day"})
    def orders(context: dg.AssetExecutionContext) -> Any:
        how = context.run.tags.get("fail")
        rows = day_rows(context.partition_key, scale=7.0)
        if how == "schema":
            return rows.append_column("extra", pa.array([1, 2, 3]))
        if how == "stream":

            def batches() -> Any:
                yield rows.to_batches()[0].slice(0, 1)
                raise RuntimeError("the source broke mid-stream")

            return pa.RecordBatchReader.from_batches(rows.schema, batches())
        return day_rows(context.partition_key)

    run([orders], lake, partition="2026-01-01")
    table = pds.Table.open(store_of(lake), "orders")
    before = table.to_arrow().sort_by("order_id")
    for how, message in (("schema", "SchemaMismatch"), ("stream", "the source broke mid-stream")):
        bad = run([orders], lake, partition="2026-01-01", tags={"fail": how}, ok=False)
        assert message in _failure(bad)
        assert table.refresh() == 0
        assert table.to_arrow().sort_by("order_id").equals(before)


def test_a_failed_dataset_stream_keeps_the_dataset(lake: tuple[str, dict[str, str]]) -> None:
    @dg.asset
    def snapshot(context: dg.AssetExecutionContext) -> Any:
        rows = pa.table({"x": [1, 2, 3]})
        if context.run.tags.get("fail") != "stream":
            return rows

        def batches() -> Any:
            yield rows.to_batches()[0]
            raise RuntimeError("the source broke mid-stream")

        return pa.RecordBatchReader.from_batches(rows.schema, batches())

    run([snapshot], lake)
    bad = run([snapshot], lake, tags={"fail": "stream"}, ok=False)
    assert "the source broke mid-stream" in _failure(bad)
    datasets = pds.ParquetDatasetStore(store_of(lake))
    assert datasets.read_dataset("snapshot").column("x").to_pylist() == [1, 2, 3]
    # The staging dataset is gone too.
    left = [f.path for f in store_of(lake).list_files("", recursive=True) if "staging" in str(f.path)]
    assert left == [], left


def _snapshot_asset() -> Any:
    """An unpartitioned dataset asset of ``x = 0 .. n-1``, *n* from the run's tag ``n`` (3)."""

    @dg.asset
    def snapshot(context: dg.AssetExecutionContext) -> Any:
        n = int(context.run.tags.get("n", "3"))
        return pa.table({"x": list(range(n))})

    return snapshot


@pytest.mark.parametrize(
    "refused",
    [
        pytest.param(r"/snapshot/[^/]+\.parquet$", id="part-uploads"),
        pytest.param(r"/snapshot/manifest\.json$", id="manifest-swap"),
    ],
)
def test_an_overwrite_the_store_refuses_keeps_the_dataset(faulty: Any, refused: str) -> None:
    # A store failure while the new rows upload (every part PUT refused), or
    # at the commit (the manifest's compare-and-swap refused), leaves the
    # dataset as it was, with nothing of the failed write beside it; the
    # overwrite is atomic, so no staging dataset is involved.
    lake = (faulty.url, faulty.options)
    snapshot = _snapshot_asset()
    run([snapshot], lake)
    before = sorted(str(f.path) for f in faulty.direct.list_files("", recursive=True))
    faulty.proxy.fail("PUT", refused, status=400, times=None)
    bad = run([snapshot], lake, tags={"n": "5"}, ok=False)
    assert "400" in _failure(bad) or "Bad Request" in _failure(bad) or "refused" in _failure(bad), _failure(bad)
    assert any(e.action == "fail" for e in faulty.proxy.log)
    faulty.proxy.clear_rules()
    datasets = pds.ParquetDatasetStore(faulty.direct)
    assert datasets.read_dataset("snapshot").column("x").to_pylist() == [0, 1, 2]
    assert sorted(str(f.path) for f in faulty.direct.list_files("", recursive=True)) == before
    run([snapshot], lake, tags={"n": "5"})
    assert datasets.read_dataset("snapshot").column("x").to_pylist() == [0, 1, 2, 3, 4]
    left = [str(f.path) for f in faulty.direct.list_files("", recursive=True) if "_pds_staging" in str(f.path)]
    assert left == [], left


def test_a_foreign_store_overwrite_is_staged(tmp_path: Path) -> None:
    # A remote_store Store that is not pds's own backend overwrites by
    # delete-then-write: the output goes to a staging dataset first, so a
    # stream that fails leaves the dataset, and none stays behind.
    from remote_store import Store
    from remote_store.backends import LocalBackend

    from pds.dagster import dagster_dataset_io_manager

    store = Store(LocalBackend(root=str(tmp_path)))
    assert pds.ParquetDatasetStore(store)._native is None
    resources = {"io_manager": dagster_dataset_io_manager(store)}

    @dg.asset
    def snapshot(context: dg.AssetExecutionContext) -> Any:
        rows = pa.table({"x": [1, 2, 3]})
        if context.run.tags.get("fail") != "stream":
            return rows.slice(0, int(context.run.tags.get("n", "3")))

        def batches() -> Any:
            yield rows.to_batches()[0]
            raise RuntimeError("the source broke mid-stream")

        return pa.RecordBatchReader.from_batches(rows.schema, batches())

    assert dg.materialize([snapshot], resources=resources).success
    bad = dg.materialize([snapshot], resources=resources, tags={"fail": "stream"}, raise_on_error=False)
    assert "the source broke mid-stream" in _failure(bad)
    datasets = pds.ParquetDatasetStore(store)
    assert datasets.read_dataset("snapshot").column("x").to_pylist() == [1, 2, 3]
    assert dg.materialize([snapshot], resources=resources, tags={"n": "2"}).success
    assert datasets.read_dataset("snapshot").column("x").to_pylist() == [1, 2]
    assert not [f for f in store.list_files("", recursive=True) if "_pds_staging" in str(f.path)]


# -- the resource --------------------------------------------------------------


def test_resource_gives_store_tables_pipelines_and_datasets(file_lake: tuple[str, dict[str, str]]) -> None:
    url, options = file_lake
    pds.Table.create(pds.open_store(url), "t", data=pa.table({"a": [1]}))
    pipe = pds.Pipeline.create(pds.open_store(url), "p")
    pipe.source("src", key={"k": pa.int64()}, value={"v": pa.int64()})
    pipe.update({"src": pa.table({"k": [1], "v": [2]})})
    seen: dict[str, Any] = {}

    @dg.asset
    def body(pds_lake: PdsResource) -> None:
        seen["rows"] = pds_lake.table("t").to_arrow().num_rows
        seen["pipe"] = pds_lake.pipeline("p").read("src").num_rows
        pds_lake.datasets().write_dataset(pa.table({"z": [1]}), "d")
        seen["store"] = pds_lake.store().exists("d/_SUCCESS")

    run([body], file_lake, resources={"pds_lake": PdsResource(root_uri=url, storage_options=options)})
    assert seen == {"rows": 1, "pipe": 1, "store": True}


# -- the example ---------------------------------------------------------------


def test_the_example_feeds_a_pipeline_from_a_daily_table(lake: tuple[str, dict[str, str]]) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "dagster_assets", Path(__file__).resolve().parents[2] / "examples" / "dagster_assets.py"
    )
    assert spec is not None and spec.loader is not None
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    days = ["2026-01-01", "2026-01-02"]
    got = ex.run(lake[0], days, lake[1])
    want = pa.concat_tables([ex.day_orders(d) for d in days])
    assert sorted(
        zip(
            got.column("customer").to_pylist(),
            got.column("order_id").to_pylist(),
            got.column("amount").to_pylist(),
            strict=True,
        )
    ) == sorted(
        zip(
            want.column("customer").to_pylist(),
            want.column("order_id").to_pylist(),
            want.column("amount").to_pylist(),
            strict=True,
        )
    )
    table = pds.Table.open(store_of(lake), "sales/orders")
    assert table.to_arrow().num_rows == want.num_rows
    assert table.version == 2  # created with day 1, day 2 replaced in, day 1 replaced again


def test_every_output_type_and_none(file_lake: tuple[str, dict[str, str]]) -> None:
    import duckdb

    class Stream:  # anything with __arrow_c_stream__
        def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
            return pa.table({"x": [1, 2]}).__arrow_c_stream__(requested_schema)

    outputs: dict[str, Any] = {
        "arrow": pa.table({"x": [1, 2]}),
        "batch": pa.record_batch({"x": [1, 2]}),
        "reader": pa.table({"x": [1, 2]}).to_reader(),
        "polars": pl.DataFrame({"x": [1, 2]}),
        "pandas": pd.DataFrame({"x": [1, 2]}),
        "duckdb": duckdb.sql("select * from range(1, 3) t(x)"),
        "stream": Stream(),
    }

    def maker(name: str, value: Any) -> Any:
        @dg.asset(name=name)
        def make() -> Any:
            return value

        return make

    assets = [maker(name, value) for name, value in outputs.items()]

    # Annotated Any, not None: an asset typed None never reaches the IO manager.
    @dg.asset
    def nothing() -> Any:
        return None

    result = run([*assets, nothing], file_lake)
    datasets = pds.ParquetDatasetStore(store_of(file_lake))
    for name in outputs:
        assert datasets.read_dataset(name).column("x").to_pylist() == [1, 2], name
        assert metadata(result, name)["dagster/row_count"] == 2
    assert not datasets.dataset_exists("nothing")
