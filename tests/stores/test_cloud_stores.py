"""Google Cloud Storage and Azure Blob stores (issue H): what can be tested
without a server. URLs and options are parsed, and refused, before any I/O;
secrets stay out of ``repr``.

Azure has no emulator that installs from the registries this suite may
reach (Azurite is an npm package), so its server-side behaviour is tested
only on request: set ``PDS_TEST_AZURE_URL`` (``az://container/prefix``) and
``PDS_TEST_AZURE_OPTIONS`` (a JSON object of store options, e.g.
``{"account": ..., "account_key": ...}`` or an Azurite ``connection_string``) to run
``test_azure_*_against_a_server`` on your own account or Azurite.
"""

from __future__ import annotations

import json
import os
import pickle
import uuid
from typing import Any

import pyarrow as pa
import pytest
from remote_store import AlreadyExists

import pds

# Azurite's published development account key (not a secret).
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
HIDDEN = "HIDDEN-SECRET-42"


@pytest.mark.spec("H-1")
def test_gcs_urls_and_options_open_without_io() -> None:
    store = pds.open_store("gs://bucket/lake", endpoint="http://127.0.0.1:9", anonymous=True, allow_http=True)
    backend = store.unwrap(pds.ObjectStoreBackend)
    assert backend.scheme == "gs"
    with_token = pds.ObjectStoreBackend("gs://bucket", token=HIDDEN, endpoint="http://127.0.0.1:9")
    assert HIDDEN not in repr(with_token)
    assert "'token': '***'" in repr(with_token)
    # A pickle carries the options (an executor needs them), and rebuilds the same store.
    again = pickle.loads(pickle.dumps(with_token))
    assert again.url == "gs://bucket" and again.options == with_token.options


@pytest.mark.spec("H-1")
def test_azure_urls_and_options_open_without_io() -> None:
    for url in ("az://container/lake", "abfs://container/lake", "abfss://container/lake"):
        backend = pds.ObjectStoreBackend(url, account="devstoreaccount1", account_key=DEV_KEY)
        assert backend.scheme == "az"
        assert DEV_KEY not in repr(backend), repr(backend)
    account_url = pds.ObjectStoreBackend("abfss://fs@devstoreaccount1.dfs.core.windows.net/lake", account_key=DEV_KEY)
    assert account_url.scheme == "az"
    conn = (
        f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={DEV_KEY};"
        "BlobEndpoint=http://127.0.0.1:9/devstoreaccount1;"
    )
    backend = pds.ObjectStoreBackend("az://container", connection_string=conn)
    assert DEV_KEY not in repr(backend) and "'connection_string': '***'" in repr(backend)
    sas = pds.ObjectStoreBackend("az://container", account="a", sas="sv=1&sig=" + HIDDEN)
    assert HIDDEN not in repr(sas)


@pytest.mark.spec("H-1")
@pytest.mark.parametrize(
    ("url", "options", "message"),
    [
        ("gs://", {}, "need a bucket"),
        ("gs://b", {"bogus": "1"}, "unknown GCS option"),
        ("gs://b", {"bucket": "other"}, "comes from the URL"),
        ("gs://b", {"service_account_key": '{"private_key": "' + HIDDEN + '"}'}, "cannot configure GCS"),
        ("az://", {"account": "a"}, "need a container"),
        ("az://c", {"account": "a", "bogus": "1"}, "unknown Azure option"),
        ("az://c", {"account": "a", "account_key": HIDDEN + "!"}, "cannot configure Azure"),
        ("az://c", {"connection_string": "AccountKey"}, "not an Azure connection string"),
        ("az://c", {"connection_string": "Bogus=1;AccountKey=" + HIDDEN}, "not an Azure connection string"),
        # Key JSON that serde would quote back: passed as a JSON string, a field of the wrong type.
        ("gs://b", {"service_account_key": json.dumps(json.dumps({"private_key": HIDDEN}))}, "cannot configure GCS"),
        (
            "gs://b",
            {"service_account_key": json.dumps({"private_key": "k", "client_email": "e", "disable_oauth": HIDDEN})},
            "cannot configure GCS",
        ),
        ("gs://b/x?token=" + HIDDEN, {}, "takes no query string"),
        ("az://c/x?sv=1&sig=" + HIDDEN, {"account": "a"}, "takes no query string"),
        (f"s3://AKIA:{HIDDEN}@b/x", {}, "takes no user info"),
    ],
)
def test_bad_cloud_urls_and_options_fail_before_any_io(url: str, options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        pds.open_store(url, **options)
    assert HIDDEN not in str(caught.value)


# -- GCS: the emulator (tests/fake_gcs.py) ---------------------------------------


@pytest.mark.spec("H-1")
def test_gcs_anonymous_writes_send_no_machine_credentials(fake_gcs: Any) -> None:
    """``anonymous=True`` reads and writes an emulator with no key at all
    (object_store signs writes even when told to skip signing; without a key
    it would ask the metadata server for this machine's token)."""
    url = f"gs://pds-tests/{uuid.uuid4().hex}"
    store = pds.open_store(url, endpoint=fake_gcs.url, anonymous=True, allow_http=True, max_retries=0)
    store.write("k", b"1")
    with pytest.raises(AlreadyExists):
        store.write("k", b"2")
    assert store.read_bytes("k") == b"1"
    store.delete("k")
    assert not store.exists("k")


@pytest.mark.spec("H-2")
def test_gcs_compare_and_swap_follows_the_generation(gcs_store: Any) -> None:
    """A compare-and-swap on GCS matches the generation read, not the bytes: a
    rewrite with the same bytes (same MD5, same ETag) still makes the old
    generation stale, so no writer commits over a change it did not see."""
    url, options, store = gcs_store
    rs = store.unwrap(pds._core.RustStore)
    first = rs.put("p", b"same", mode="create")
    head = rs.head("p")
    assert head is not None and head.version == first.version and head.version
    again = rs.put("p", b"same")  # another writer rewrites the same bytes
    assert again.version != first.version and again.e_tag == first.e_tag
    with pytest.raises(pds.PreconditionFailed):
        rs.put("p", b"mine", mode="update", e_tag=head.e_tag, version=head.version)
    won = rs.put("p", b"mine", mode="update", e_tag=again.e_tag, version=again.version)
    assert rs.get("p") == b"mine" and won.version not in (first.version, again.version)
    # The emulator decides: the generation a put reports is the one a read sees.
    latest = pds.open_store(url, **options).unwrap(pds._core.RustStore).head("p")
    assert latest is not None and latest.version == won.version


@pytest.mark.spec("H-2")
def test_gcs_copies_and_renames_keep_their_modes(gcs_store: Any) -> None:
    """object_store 0.13 sends GCS copies' modes the wrong way round; pds
    corrects them: a create-only copy or rename never replaces its target,
    an overwriting one does."""
    _, _, store = gcs_store
    rs = store.unwrap(pds._core.RustStore)
    rs.put("a", b"A")
    rs.put("b", b"B")
    with pytest.raises(AlreadyExists):
        rs.copy("a", "b", overwrite=False)
    with pytest.raises(AlreadyExists):
        rs.rename("a", "b", overwrite=False)
    assert (rs.get("a"), rs.get("b")) == (b"A", b"B")
    rs.copy("a", "b", overwrite=True)
    assert rs.get("b") == b"A"
    rs.put("c", b"C")
    rs.rename("c", "b", overwrite=True)
    assert rs.get("b") == b"C" and rs.head("c") is None
    rs.rename("b", "d", overwrite=False)
    assert rs.get("d") == b"C" and rs.head("b") is None


# -- opt-in: a real Azure account or Azurite -----------------------------------

AZURE_URL = os.environ.get("PDS_TEST_AZURE_URL")
needs_azure = pytest.mark.skipif(
    not AZURE_URL, reason="set PDS_TEST_AZURE_URL (and PDS_TEST_AZURE_OPTIONS) to test against Azure or Azurite"
)


def _azure_store() -> Any:
    assert AZURE_URL is not None
    options = json.loads(os.environ.get("PDS_TEST_AZURE_OPTIONS", "{}"))
    return pds.open_store(f"{AZURE_URL.rstrip('/')}/{uuid.uuid4().hex}", **options)


@needs_azure
@pytest.mark.spec("H-4")
def test_azure_conditional_writes_against_a_server() -> None:
    store = _azure_store()
    store.write("k", b"1")
    with pytest.raises(AlreadyExists):
        store.write("k", b"2")
    assert store.read_bytes("k") == b"1"


@needs_azure
@pytest.mark.spec("H-4")
def test_azure_datasets_and_tables_against_a_server() -> None:
    store = _azure_store()
    rows = pa.table({"id": pa.array(range(1000), pa.int64()), "x": pa.array([i * 0.5 for i in range(1000)])})
    ds = pds.ParquetDatasetStore(store, max_rows_per_file=300)
    ds.write_dataset(rows, "d")
    assert ds.read_dataset("d", verify=True).equals(rows)
    t = pds.Table.create(store, "t", schema=rows.schema)
    t.append(rows)
    t.delete([("id", "<", 10)])
    assert t.to_arrow().num_rows == 990
    # Two handles on the same version: one commit wins, the other retries on top.
    a, b = pds.Table.open(store, "t"), pds.Table.open(store, "t")
    a.append(rows.slice(0, 5))
    b.append(rows.slice(5, 5))
    assert pds.Table.open(store, "t").to_arrow().num_rows == 1000
