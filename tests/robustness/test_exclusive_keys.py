"""Keys are exclusive (issue #15, section 3): a dataset, a table or a
pipeline is never created at, inside or around the key of another one.

Every pair (what is there) x (what is created) x (at, inside, around) runs
on memory://, file:// and SeaweedFS (pds's backend); the dataset writer's
portable path runs on remote-store's own backends. A refusal is
``remote_store.AlreadyExists`` naming what is there and its key, and
nothing is written or deleted.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from remote_store import AlreadyExists, Store
from remote_store.backends import LocalBackend

import pds
from pds.backend import native_handle

KINDS = ["dataset", "table", "pipeline"]
DATA = pa.table({"id": pa.array([1, 2, 3], pa.int64())})


def make(store: Store, kind: str, key: str, *, overwrite: bool = False) -> None:
    if kind == "dataset":
        pds.ParquetDatasetStore(store).write_dataset(DATA, key, overwrite=overwrite)
    elif kind == "table":
        pds.Table.create(store, key, data=DATA)
    else:
        pds.Pipeline.create(store, key)


def objects(store: Store) -> dict[str, int]:
    """Every object of the store with its size."""
    handle = native_handle(store)
    if handle is not None:
        listed, _ = handle.list("", recursive=True)
        return {o.key: o.size for o in listed}
    return {str(f.path): f.size for f in store.list_files("", recursive=True)}


def refused(store: Store, kind: str, key: str, there: str, at: str, *, overwrite: bool = False) -> None:
    """Creating *kind* at *key* raises AlreadyExists naming *there* at *at*, and changes nothing."""
    before = objects(store)
    with pytest.raises(AlreadyExists) as err:
        make(store, kind, key, overwrite=overwrite)
    message = str(err.value)
    assert f"{there} " in message and repr(at).replace("'", '"') in message, message
    assert objects(store) == before


# (where the existing one is, where the new one goes): at, inside, around.
PLACES = {"at": ("events", "events"), "inside": ("events", "events/archive"), "around": ("events/archive", "events")}


@pytest.mark.spec("S-3")
@pytest.mark.parametrize("relation", list(PLACES))
@pytest.mark.parametrize("creating", KINDS)
@pytest.mark.parametrize("existing", KINDS)
def test_no_kind_nests_in_or_shares_a_key_with_another(
    fast_store: Store, existing: str, creating: str, relation: str
) -> None:
    there_key, new_key = PLACES[relation]
    make(fast_store, existing, there_key)
    if existing == creating and relation == "at":
        before = objects(fast_store)
        with pytest.raises(AlreadyExists):  # each kind's own "exists" error
            make(fast_store, creating, new_key)
        assert objects(fast_store) == before
    else:
        refused(fast_store, creating, new_key, existing, there_key)
    # What was there is intact.
    if existing == "dataset":
        assert pds.ParquetDatasetStore(fast_store).read_dataset(there_key).equals(DATA)
    elif existing == "table":
        assert pds.Table.open(fast_store, there_key).to_arrow().equals(DATA)
    else:
        assert pds.Pipeline.open(fast_store, there_key).version == 0


@pytest.mark.spec("S-3")
@pytest.mark.parametrize("relation", list(PLACES))
@pytest.mark.parametrize("existing", KINDS)
def test_a_dataset_overwrite_replaces_only_a_dataset_at_its_key(
    fast_store: Store, existing: str, relation: str
) -> None:
    there_key, new_key = PLACES[relation]
    make(fast_store, existing, there_key)
    if existing == "dataset" and relation == "at":
        make(fast_store, "dataset", new_key, overwrite=True)  # a dataset over a dataset stays allowed
        assert pds.ParquetDatasetStore(fast_store).read_dataset(new_key).equals(DATA)
        return
    refused(fast_store, "dataset", new_key, existing, there_key, overwrite=True)


@pytest.mark.spec("S-3")
def test_the_message_names_the_kind_the_key_and_the_relation(fast_store: Store) -> None:
    pds.Table.create(fast_store, "lake/events", data=DATA)
    with pytest.raises(AlreadyExists, match=re.escape('it would lie inside the table at "lake/events"')):
        pds.ParquetDatasetStore(fast_store).write_dataset(DATA, "lake/events/2024/archive")
    with pytest.raises(AlreadyExists, match=re.escape('the table at "lake/events" lies inside it')):
        pds.Pipeline.create(fast_store, "lake")
    with pytest.raises(AlreadyExists, match=re.escape('cannot create a dataset at "lake/events": a table is')):
        pds.ParquetDatasetStore(fast_store).write_dataset(DATA, "lake/events")
    # Siblings are not nested: "lake/events2" is free.
    pds.ParquetDatasetStore(fast_store).write_dataset(DATA, "lake/events2")


@pytest.mark.spec("S-3")
def test_exist_ok_returns_only_what_it_would_create(fast_store: Store) -> None:
    pds.Pipeline.create(fast_store, "p")
    assert pds.Pipeline.create(fast_store, "p", exist_ok=True).version == 0
    pds.Table.create(fast_store, "t", data=DATA)
    assert pds.Table.create(fast_store, "t", DATA.schema, exist_ok=True).version == 0
    with pytest.raises(AlreadyExists, match="a table is stored there"):
        pds.Pipeline.create(fast_store, "t", exist_ok=True)
    with pytest.raises(AlreadyExists, match="a pipeline is stored there"):
        pds.Table.create(fast_store, "p", DATA.schema, exist_ok=True)


@pytest.mark.spec("S-3")
def test_an_unfinished_dataset_write_also_occupies_its_key(fast_store: Store) -> None:
    """A killed writer's claim (``_WRITING``) marks a dataset key as much as ``_SUCCESS``."""
    fast_store.write("killed/_WRITING", b'{"writer": "x"}')
    refused(fast_store, "table", "killed", "unfinished dataset", "killed")
    refused(fast_store, "pipeline", "killed/inner", "unfinished dataset", "killed")


@pytest.mark.parametrize("kind", ["rs_memory", "rs_local"])
@pytest.mark.spec("S-3")
def test_the_portable_dataset_path_refuses_nesting(store_factory: Callable[[str], Store], kind: str) -> None:
    store = store_factory(kind)
    ds = pds.ParquetDatasetStore(store)
    ds.write_dataset(DATA, "a/b")
    for key, says in [("a", 'the dataset at "a/b" lies inside it'), ("a/b/c", 'inside the dataset at "a/b"')]:
        for overwrite in (False, True):
            refused(store, "dataset", key, "dataset", "a/b", overwrite=overwrite)
            with pytest.raises(AlreadyExists, match=re.escape(says)):
                ds.write_dataset(DATA, key, overwrite=overwrite)
    ds.write_dataset(DATA, "a/b", overwrite=True)
    assert ds.read_dataset("a/b").equals(DATA)


@pytest.mark.spec("S-3")
def test_the_portable_path_sees_tables_and_pipelines(tmp_path: Path) -> None:
    """Tables and pipelines written by pds on a folder are seen through remote-store's LocalBackend on it."""
    root = tmp_path / "lake"
    root.mkdir()
    fast = pds.open_store(root.as_uri())
    pds.Table.create(fast, "t", data=DATA)
    pds.Pipeline.create(fast, "p/q")
    portable = Store(LocalBackend(str(root)))
    for key, there, at in [
        ("t", "table", "t"),
        ("t/x", "table", "t"),
        ("p", "pipeline", "p/q"),
        ("p/q", "pipeline", "p/q"),
    ]:
        for overwrite in (False, True):
            refused(portable, "dataset", key, there, at, overwrite=overwrite)
    assert pds.Table.open(fast, "t").to_arrow().equals(DATA)
