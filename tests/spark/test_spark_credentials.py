"""Stores opened with ``pickle_secrets=False``: their pickles (what Spark
tasks carry) hold no credential, and the unpickled copy (an executor) takes
its keys from its own environment, or is denied; never anonymous.

On SeaweedFS (conftest's ``seaweed``), and Spark's ``local[2]`` session,
whose Python workers get their environment from the SparkContext's
``environment`` (what ``spark.executorEnv.*`` sets): the tests clear the
keys from the driver's own environment, so the driver can only use the
options' keys, and the workers only their environment's. What the tasks
carry is observed where PySpark pickles it: ``CloudPickleSerializer.dumps``
in the driver for the helpers' task functions, and PySpark's own planner
function (``write_read_func_and_partitions``, run here on the real data
source) for ``format("pds")`` reads, whose planning runs in Python workers.
``tests/spark/test_spark_cluster.py`` runs one such job on separate executor JVMs.
"""

from __future__ import annotations

import copy
import io
import pickle
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyspark import cloudpickle
from pyspark.serializers import CloudPickleSerializer, read_int
from pyspark.sql import SparkSession
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.worker.plan_data_source_read import write_read_func_and_partitions
from remote_store import PermissionDenied
from store_kinds import BUCKET, Faulty
from test_spark import by_id
from test_spark_pipeline_faults import build as build_pipeline_case
from test_spark_pipeline_faults import content, recompute

import pds
import pds.spark
from pds import _core
from pds.spark.datasource import PdsDataSource

pytestmark = pytest.mark.s3

cloudpickle.register_pickle_by_value(sys.modules[__name__])

#: Every variable that could give the AWS credential chain keys.
CREDENTIAL_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


@pytest.fixture
def no_env_keys(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """This process's environment without AWS credentials."""
    for name in CREDENTIAL_ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def fresh_url() -> str:
    return f"s3://{BUCKET}/creds-{uuid.uuid4().hex[:12]}"


def keys_in(blob: bytes, seaweed: Any) -> list[str]:
    """Which of SeaweedFS's two keys *blob* holds."""
    return [k for k in (seaweed.access_key, seaweed.secret_key) if k.encode() in blob]


# -- pickles -------------------------------------------------------------------------------


def test_a_store_opened_without_pickling_secrets_pickles_none_of_its_keys(seaweed: Any) -> None:
    token = f"token-{uuid.uuid4().hex}"
    options = {**seaweed.store_options(), "session_token": token}
    url = fresh_url()
    store = pds.open_store(url, pickle_secrets=False, **options)
    backend = store.unwrap(pds.ObjectStoreBackend)
    rust = store.unwrap(_core.RustStore)
    for what in (store, backend, rust):
        for dumps in (pickle.dumps, cloudpickle.dumps):
            blob = dumps(what)
            assert keys_in(blob, seaweed) == [], type(what).__name__
            assert token.encode() not in blob, type(what).__name__
    # The rest travels, with the flag; the driver's own store keeps its keys.
    shared = {k: v for k, v in options.items() if k not in ("access_key_id", "secret_access_key", "session_token")}
    assert shared and set(shared) <= {"endpoint", "region", "allow_http"}
    copy = pickle.loads(pickle.dumps(store)).unwrap(pds.ObjectStoreBackend)
    assert copy.options == shared and not copy.pickle_secrets and copy.url == url
    assert backend.options == options and not backend.pickle_secrets
    assert "pickle_secrets=False" in repr(backend) and "pickle_secrets=False" in repr(copy)
    assert "pickle_secrets=False" in repr(rust) and token not in repr(rust)
    rust_copy = pickle.loads(pickle.dumps(rust))
    assert "pickle_secrets=False" in repr(rust_copy) and seaweed.access_key not in repr(rust_copy)

    # The default is unchanged: every option travels.
    default = pds.open_store(url, **options)
    for what in (default, default.unwrap(pds.ObjectStoreBackend), default.unwrap(_core.RustStore)):
        blob = pickle.dumps(what)
        assert keys_in(blob, seaweed) == [seaweed.access_key, seaweed.secret_key] and token.encode() in blob
    assert pickle.loads(pickle.dumps(default)).unwrap(pds.ObjectStoreBackend).options == options
    assert "pickle_secrets" not in repr(default.unwrap(pds.ObjectStoreBackend))


class _HeldKeys:
    """A user's credentials callable that holds its keys: its pickle holds them."""

    def __init__(self, secret: str) -> None:
        self.secret = secret

    def __call__(self) -> tuple[str, str, str | None, float | None]:
        return ("AKIDHELD", self.secret, None, None)


def test_a_credentials_callable_travels_only_where_secrets_may() -> None:
    """With ``pickle_secrets=False`` a store's credentials callable stays
    behind, unless it pickles without secrets (a profile's: its name)."""
    secret = f"held-{uuid.uuid4().hex}"
    for flag in (True, False):
        rust = _core.RustStore("s3://box/lake", {"region": "us-east-1"}, _HeldKeys(secret), pickle_secrets=flag)
        for dumps in (pickle.dumps, cloudpickle.dumps):
            assert (secret.encode() in dumps(rust)) is flag, (flag, dumps)
        assert (secret.encode() in pickle.dumps(pickle.loads(pickle.dumps(rust)))) is flag
    from pds.backend import _ProfileCredentials

    profile = _core.RustStore(
        "s3://box/lake", {"region": "us-east-1"}, _ProfileCredentials("nightly"), pickle_secrets=False
    )
    blob = pickle.dumps(profile)
    assert b"_ProfileCredentials" in blob and b"nightly" in blob


def test_azure_keys_are_left_out_too() -> None:
    account_key = "c2VjcmV0LWF6dXJlLWtleS0xMjM0NTY3ODkw"  # base64, as an account key is
    store = pds.open_store("az://box/lake", pickle_secrets=False, account="acct", account_key=account_key)
    blob = pickle.dumps(store)
    assert account_key.encode() not in blob and b"acct" in blob
    assert pickle.loads(blob).unwrap(pds.ObjectStoreBackend).options == {"account": "acct"}


def test_identity_selectors_stay_behind_and_encryption_settings_travel() -> None:
    """The options that choose which identity signs are left out with the keys
    (they would pair with another environment's secret); S3's server-side
    encryption settings travel, so executors encrypt as the driver does."""
    az = pds.open_store(
        "az://box/lake", pickle_secrets=False, account="acct", client_id="cid", tenant_id="tid", client_secret="cs"
    )
    assert pickle.loads(pickle.dumps(az)).unwrap(pds.ObjectStoreBackend).options == {"account": "acct"}
    s3 = pds.open_store(
        "s3://b/x",
        pickle_secrets=False,
        region="r",
        access_key_id="AKIDEXAMPLE",
        secret_access_key="SECRETEXAMPLE",
        aws_server_side_encryption="aws:kms",
        aws_sse_kms_key_id="kms-key",
        aws_sse_bucket_key_enabled="true",
    )
    copied = pickle.loads(pickle.dumps(s3)).unwrap(pds.ObjectStoreBackend).options
    assert copied == {
        "region": "r",
        "aws_server_side_encryption": "aws:kms",
        "aws_sse_kms_key_id": "kms-key",
        "aws_sse_bucket_key_enabled": "true",
    }


def test_a_connection_string_is_refused_and_copies_in_process_keep_the_keys() -> None:
    conn = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net"
    with pytest.raises(ValueError, match="connection_string holds the account"):
        pds.open_store("az://box/lake", pickle_secrets=False, connection_string=conn)
    assert pds.open_store("az://box/lake", connection_string=conn)  # the default takes it
    store = pds.open_store("s3://b/x", pickle_secrets=False, access_key_id="AKIDEXAMPLE", secret_access_key="S3CRET")
    backend = store.unwrap(pds.ObjectStoreBackend)
    for twin in (copy.copy(backend), copy.deepcopy(backend)):
        assert twin.options == backend.options and not twin.pickle_secrets
    # The default pickles as earlier versions did (URL and options), so older executors read it.
    default = pds.open_store("s3://b/x", access_key_id="AKIDEXAMPLE", secret_access_key="S3CRET")
    assert len(default.unwrap(pds.ObjectStoreBackend).__reduce__()[1]) == 2
    assert len(default.unwrap(_core.RustStore).__reduce__()[1]) == 3


def test_pickle_secrets_is_a_bool_and_no_store_option() -> None:
    with pytest.raises(TypeError, match="pickle_secrets must be a bool"):
        pds.open_store("s3://b/x", pickle_secrets=0)
    with pytest.raises(ValueError, match="pickle_secrets must be true or false"):
        pds.open_store("s3://b/x", pickle_secrets="no")
    # As text, as options often are (a data source's, a config file's).
    assert not pds.open_store("s3://b/x", pickle_secrets="False").unwrap(pds.ObjectStoreBackend).pickle_secrets
    with pytest.raises(ValueError, match="pickle_secrets"):
        _core.RustStore("s3://b/x", {"pickle_secrets": "false"})
    with pytest.raises(ValueError, match="bogus"):
        pds.open_store("s3://b/x", pickle_secrets=False, bogus="1")


# -- the unpickled copy on SeaweedFS ------------------------------------------------------


def test_the_unpickled_copy_signs_with_the_keys_of_its_environment(
    seaweed: Any, no_env_keys: pytest.MonkeyPatch
) -> None:
    store = pds.open_store(fresh_url(), pickle_secrets=False, **seaweed.store_options())
    store.write("a/one", b"from the driver")  # the options' keys: the environment has none
    blob = pickle.dumps(store)
    no_env_keys.setenv("AWS_ACCESS_KEY_ID", seaweed.access_key)
    no_env_keys.setenv("AWS_SECRET_ACCESS_KEY", seaweed.secret_key)
    copy = pickle.loads(blob)
    assert copy.read_bytes("a/one") == b"from the driver"
    copy.write("a/two", b"from the copy")
    assert store.read_bytes("a/two") == b"from the copy"


def test_an_unpickled_copy_without_keys_in_its_environment_is_denied_not_anonymous(
    seaweed: Any, no_env_keys: pytest.MonkeyPatch
) -> None:
    """No keys in the environment: the copy's credential chain ends at the
    instance metadata endpoint (a closed local port here, as off EC2) and
    the request fails with ``PermissionDenied`` naming where pds looked; it
    is never sent unsigned (SeaweedFS would then answer AccessDenied, not
    this)."""
    options = {
        **seaweed.store_options(),
        "metadata_endpoint": "http://127.0.0.1:9",
        "max_retries": "0",
        "retry_timeout_secs": "1",
    }
    store = pds.open_store(fresh_url(), pickle_secrets=False, **options)
    store.write("k", b"secret data")
    copy = pickle.loads(pickle.dumps(store))
    with pytest.raises(PermissionDenied) as denied:
        copy.read_bytes("k")
    for place in ("AWS_ACCESS_KEY_ID", "instance metadata"):
        assert place in str(denied.value)
    assert store.read_bytes("k") == b"secret data"


# -- Spark: what the tasks carry ----------------------------------------------------------


@pytest.fixture
def spark_with_env_keys(spark_session: SparkSession, seaweed: Any, no_env_keys: pytest.MonkeyPatch) -> SparkSession:
    """The local session whose Python workers have SeaweedFS's keys in their
    environment (the SparkContext's ``environment``, which
    ``spark.executorEnv.*`` fills), while the driver's has none."""
    env = spark_session.sparkContext.environment
    no_env_keys.setitem(env, "AWS_ACCESS_KEY_ID", seaweed.access_key)
    no_env_keys.setitem(env, "AWS_SECRET_ACCESS_KEY", seaweed.secret_key)
    return spark_session


class Pickled:
    """Every blob PySpark's ``CloudPickleSerializer`` makes in this process
    (the task functions of ``mapInArrow``/``mapInPandas`` and the like)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.blobs: list[bytes] = []
        original: Callable[[CloudPickleSerializer, Any], bytes] = CloudPickleSerializer.dumps

        def dumps(ser: CloudPickleSerializer, obj: Any) -> bytes:
            blob = original(ser, obj)
            self.blobs.append(bytes(blob))
            return blob

        monkeypatch.setattr(CloudPickleSerializer, "dumps", dumps)

    def take(self) -> list[bytes]:
        taken, self.blobs = self.blobs, []
        return taken


def test_the_helpers_tasks_carry_no_key_and_write_what_the_default_does(
    spark_with_env_keys: SparkSession, seaweed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    spark = spark_with_env_keys
    options = seaweed.store_options()
    table = pa.table({"id": pa.array(range(200), pa.int64()), "v": [f"v{i}" for i in range(200)]})
    changed = pa.table({"id": pa.array([*range(150, 250, 5)], pa.int64()), "v": ["new"] * 20})
    pickled = Pickled(monkeypatch)
    results: dict[bool, Any] = {}
    for pickle_secrets in (True, False):
        url = fresh_url()
        store = pds.open_store(url, pickle_secrets=pickle_secrets, **options)
        df = spark.createDataFrame(table).repartition(2)
        ups = spark.createDataFrame(changed).repartition(2)
        pds.Table.create(store, "orders", data=table, primary_key="id")
        case = build_pipeline_case(Faulty(proxy=None, url=url, options=options, store=store, direct=store))
        spark_changes = case.changes(spark)
        pickled.take()

        carried: dict[str, list[bytes]] = {}
        pds.spark.write_dataset(df, url, "ds", pickle_secrets=pickle_secrets, **options)
        carried["write_dataset"] = pickled.take()
        pds.spark.upsert(ups, url, "orders", pickle_secrets=pickle_secrets, **options)
        carried["upsert"] = pickled.take()
        assert pds.spark.update_pipeline(spark, case.p, spark_changes) == 2
        carried["update_pipeline"] = pickled.take()

        for helper, blobs in carried.items():
            tasks = [b for b in blobs if b"pds.spark" in b]
            assert tasks, f"{helper}: the hook saw no pds task"
            with_keys = [b for b in blobs if keys_in(b, seaweed)]
            if pickle_secrets:
                assert with_keys, f"{helper}: with the default, the tasks carry the keys"
            else:
                assert with_keys == [], f"{helper}: {len(with_keys)} of {len(blobs)} pickled functions carry a key"
        results[pickle_secrets] = (
            by_id(pds.ParquetDatasetStore(store).read_dataset("ds")),
            by_id(pds.Table.open(store, "orders").to_arrow()),
            content(case.p),
        )
    assert results[False][0].equals(results[True][0])
    assert results[False][0].num_rows == 200
    assert results[False][1].equals(results[True][1])
    assert results[False][2] == results[True][2] == recompute(case.after)


# -- Spark: format("pds") ------------------------------------------------------------------


def planned_read(source: PdsDataSource) -> tuple[bytes, list[bytes]]:
    """What PySpark's read planning sends to the tasks for *source*, as its
    workers do: the source pickled by the worker that made it, unpickled by
    the planner, its reader, then PySpark's own
    ``write_read_func_and_partitions``: the pickled read function (which
    holds the reader and the source) and the pickled partitions."""
    schema = source.schema()
    planner: PdsDataSource = cloudpickle.loads(cloudpickle.dumps(source))
    reader = planner.reader(schema)
    out = io.BytesIO()
    write_read_func_and_partitions(
        out, reader=reader, data_source=planner, schema=schema, max_arrow_batch_size=10_000, binary_as_bytes=True
    )
    stream = io.BytesIO(out.getvalue())
    command = stream.read(read_int(stream))
    partitions = [stream.read(read_int(stream)) for _ in range(read_int(stream))]
    return command, partitions


def run_read_task(command: bytes, partition: bytes) -> pa.Table:
    """One read task as an executor runs it: PySpark's read function, unpickled here."""
    func, _ = cloudpickle.loads(command)
    batches: Iterator[pa.RecordBatch] = func(iter([pa.record_batch([pa.array([partition], pa.binary())], ["p"])]))
    return pa.Table.from_batches(list(batches))


def test_a_pds_source_read_carries_no_key_into_its_tasks(
    spark_with_env_keys: SparkSession, seaweed: Any, no_env_keys: pytest.MonkeyPatch
) -> None:
    # Off EC2: the credential chain's last step (instance metadata) fails at once.
    options = {**seaweed.store_options(), "metadata_endpoint": "http://127.0.0.1:9", "max_retries": "0"}
    url = fresh_url()
    table = pa.table({"id": pa.array(range(300), pa.int64()), "v": [f"v{i}" for i in range(300)]})
    pds.ParquetDatasetStore(pds.open_store(url, **options), max_rows_per_file=100).write_dataset(table, "ds")

    found: dict[bool, list[pa.Table]] = {}
    for pickle_secrets in (True, False):
        given = {"store": url, "path": "ds", **options, "pickle_secrets": str(pickle_secrets).lower()}
        source = PdsDataSource(options=CaseInsensitiveDict(given))
        # The worker that makes the source hands it to the planner (both on
        # the driver) with every option: the planner opens the store with them.
        assert keys_in(cloudpickle.dumps(source), seaweed) == [seaweed.access_key, seaweed.secret_key]
        command, partitions = planned_read(source)
        assert len(partitions) == 3
        if pickle_secrets:
            assert keys_in(command, seaweed) == [seaweed.access_key, seaweed.secret_key]
        else:
            assert keys_in(command, seaweed) == [] and not any(keys_in(p, seaweed) for p in partitions)
            # An executor without keys in its environment cannot read ...
            with pytest.raises(PermissionDenied):
                run_read_task(command, partitions[0])
        # ... one with them can.
        no_env_keys.setenv("AWS_ACCESS_KEY_ID", seaweed.access_key)
        no_env_keys.setenv("AWS_SECRET_ACCESS_KEY", seaweed.secret_key)
        found[pickle_secrets] = [run_read_task(command, p) for p in partitions]
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            no_env_keys.delenv(name)
    assert by_id(pa.concat_tables(found[False])).equals(by_id(pa.concat_tables(found[True])))
    assert by_id(pa.concat_tables(found[False])).equals(table)
    # Not read through a local Spark here: a local master's data-source workers
    # take the environment the driver's JVM started with (spark.executorEnv
    # does not reach them), so the outcome would depend on which test started
    # the session. tests/spark/test_spark_cluster.py reads with executors' own keys.


def test_a_pds_source_write_refuses_pickle_secrets_false_with_keys_before_any_io(
    spark_with_env_keys: SparkSession, seaweed: Any
) -> None:
    """PySpark hands the driver's commit the same pickled writer as the
    tasks: with keys in the options and ``pickle_secrets`` false, the
    commit would have none: refused before the claim, naming the options
    (never their values). A bad value is refused too."""
    spark = spark_with_env_keys
    options = seaweed.store_options()
    url = fresh_url()
    store = pds.open_store(url, **options)
    df = spark.createDataFrame(pa.table({"id": pa.array(range(50), pa.int64())})).repartition(2)
    writer = df.write.format("pds").option("store", url).option("pickle_secrets", "false").mode("append")
    with pytest.raises(Exception, match="pickle_secrets=false with credential options") as refused:
        writer.options(**options).save("ds")
    assert "secret_access_key" in str(refused.value) and seaweed.secret_key not in str(refused.value)
    assert not store.exists("ds")
    with pytest.raises(ValueError, match="pickle_secrets must be true or false"):
        PdsDataSource(options=CaseInsensitiveDict({"store": url, "path": "ds", "pickle_secrets": "no"})).writer(
            df.schema, False
        )
