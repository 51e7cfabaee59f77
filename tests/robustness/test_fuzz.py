"""A seeded fuzz suite (R): damaged manifests, IPC schemas and parts, and
random Arrow schemas and data, on the fast path (memory://) and the portable
path (remote-store's MemoryBackend).

Every outcome must be an equal round trip or a typed ``RemoteStoreError``
(``TypeError`` / ``ValueError`` for arguments pds refuses): never a panic
(``PanicException`` is a ``BaseException``), a signal, or different data.
The damage loops run in a child process, so a crash fails the test with its
seed instead of killing the run. Bounded to a couple of minutes in all.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from remote_store import RemoteStoreError, Store
from remote_store.backends import MemoryBackend

import pds

# -- damage, in a child process ---------------------------------------------------------

_DAMAGE = textwrap.dedent(
    r"""
    import base64, json, random, sys
    import pyarrow as pa
    import pds
    from remote_store import RemoteStoreError, Store
    from remote_store.backends import MemoryBackend

    sys.path.insert(0, sys.argv[2])
    from helpers import sample

    seed = int(sys.argv[1])
    rng = random.Random(seed)
    table = sample(3000)
    outcomes = {}

    def note(kind):
        outcomes[kind] = outcomes.get(kind, 0) + 1

    def attempt(what, read, expected=table):
        try:
            got = read()
        except (RemoteStoreError, TypeError, ValueError) as exc:
            note(type(exc).__name__)
            return
        if isinstance(got, pa.Table) and not got.equals(expected):
            print(f"DIFFERENT seed={seed} {what}", flush=True)
            sys.exit(3)
        note("equal")

    projected = table.select(["name", "id"])

    def reads(ds):
        return [
            ("read", lambda: ds.read_dataset("d"), table),
            ("columns", lambda: ds.read_dataset("d", columns=["name", "id"]), projected),
            ("iter", lambda: ds.iter_batches("d", batch_size=333).read_all(), table),
            ("filter", lambda: ds.read_dataset("d", filter=[("id", ">=", 0)]), table),
        ]

    def mutate_json(value, depth=0):
        kind = rng.randrange(9)
        if isinstance(value, dict) and value and kind < 4:
            key = rng.choice(sorted(value))
            value = dict(value)
            if kind == 0:
                del value[key]
            else:
                value[key] = mutate_json(value[key], depth + 1)
            return value
        if isinstance(value, list) and value and kind < 4:
            value = list(value)
            i = rng.randrange(len(value))
            if kind == 0:
                del value[i]
            elif kind == 1:
                value.append(value[i])
            else:
                value[i] = mutate_json(value[i], depth + 1)
            return value
        return rng.choice([None, True, -1, 0, 2**63, 2**70, 1.5, "", "x", "../x", [], {}, "data.parquet", "\u00e9"])

    for store in (pds.open_store("memory://"), Store(MemoryBackend())):
        ds = pds.ParquetDatasetStore(store, max_rows_per_file=1000, row_group_size=400, compression=rng.choice(["zstd", "snappy", "none", "gzip"]))
        ds.write_dataset(table, "d")
        manifest_text = store.read_bytes("d/manifest.json")
        manifest = json.loads(manifest_text)
        parts = {p: store.read_bytes(f"d/{p}") for p in manifest["parts"]}

        def restore():
            store.write("d/manifest.json", manifest_text, overwrite=True)
            for p, data in parts.items():
                store.write(f"d/{p}", data, overwrite=True)

        for _ in range(40):  # manifest JSON
            restore()
            store.write("d/manifest.json", json.dumps(mutate_json(manifest)).encode(), overwrite=True)
            for what, read, want in reads(ds)[:3]:
                attempt("manifest " + what, read, want)
        raw_schema = base64.b64decode(manifest["arrow_schema"])
        for _ in range(60):  # the IPC schema in the manifest
            restore()
            damaged = bytearray(raw_schema)
            for _ in range(rng.randrange(1, 4)):
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
            if rng.random() < 0.2:
                damaged = damaged[: rng.randrange(len(damaged))]
            changed = dict(manifest, arrow_schema=base64.b64encode(bytes(damaged)).decode())
            store.write("d/manifest.json", json.dumps(changed).encode(), overwrite=True)
            for what, read, want in [*reads(ds)[:3], ("schema", lambda: ds.read_schema("d"), table)]:
                attempt("ipc " + what, read, want)
        for _ in range(120):  # part bytes
            restore()
            name = rng.choice(sorted(parts))
            data = bytearray(parts[name])
            kind = rng.randrange(5)
            if kind == 0:
                at = rng.randrange(len(data))
                data[at] ^= 1 << rng.randrange(8)
            elif kind == 1:
                data = data[: rng.randrange(len(data))]
            elif kind == 2:  # the footer length before the closing PAR1
                data[-8:-4] = rng.randrange(2**32).to_bytes(4, "little")
            elif kind == 3:
                at = rng.randrange(len(data) - 4)
                data[at : at + 4] = rng.randrange(2**32).to_bytes(4, "little")
            else:
                data = data + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
            store.write(f"d/{name}", bytes(data), overwrite=True)
            for what, read, want in reads(ds):
                attempt(f"part {kind} " + what, read, want)
    print(json.dumps(outcomes), flush=True)
    """
)


@pytest.mark.spec("R-FUZZ")
@pytest.mark.parametrize("seed", [11, 12, 13])
def test_damaged_manifests_schemas_and_parts(seed: int) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _DAMAGE, str(seed), str(Path(__file__).resolve().parents[1])],
        capture_output=True,
        text=True,
        timeout=600,
        env={"RUST_BACKTRACE": "0", **{k: v for k, v in __import__("os").environ.items() if k != "RUST_BACKTRACE"}},
    )
    assert done.returncode == 0, f"seed {seed}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    outcomes = json.loads(done.stdout.strip().splitlines()[-1])
    assert "PanicException" not in outcomes
    assert outcomes.get("equal", 0) > 0 and outcomes.get("PartCorrupted", 0) > 0, outcomes


# -- random schemas and data: round trips --------------------------------------------------

_TIMEZONES = [None, "UTC", "Europe/Berlin"]


def _types() -> st.SearchStrategy[pa.DataType]:
    leaves = st.sampled_from(
        [
            pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(),
            pa.uint64(), pa.float32(), pa.float64(), pa.string(), pa.large_string(), pa.binary(),
            pa.large_binary(), pa.string_view(), pa.binary_view(), pa.date32(), pa.decimal128(12, 3),
            pa.decimal128(38, 0), pa.binary(4), pa.duration("us"), pa.time64("us"),
            *[pa.timestamp(u, tz=tz) for u in ("ms", "us", "ns") for tz in _TIMEZONES],
            pa.dictionary(pa.int32(), pa.string()), pa.dictionary(pa.uint32(), pa.string_view()),
            pa.dictionary(pa.int8(), pa.large_string()),
        ]
    )  # fmt: skip

    def nested(inner: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
        return st.one_of(
            inner.map(pa.list_),
            inner.map(pa.large_list),
            st.lists(inner, min_size=1, max_size=3).map(
                lambda ts: pa.struct([pa.field(f"f{i}", t) for i, t in enumerate(ts)])
            ),
            inner.map(lambda t: pa.map_(pa.string(), t)),
        )

    return st.recursive(leaves, nested, max_leaves=4)


def _value(t: pa.DataType, rng: random.Random) -> Any:
    if pa.types.is_dictionary(t):
        return rng.choice(["a", "b", "é", ""])
    if pa.types.is_boolean(t):
        return rng.random() < 0.5
    if pa.types.is_integer(t):
        lo, hi = (
            (0, 2**t.bit_width - 1)
            if pa.types.is_unsigned_integer(t)
            else (-(2 ** (t.bit_width - 1)), 2 ** (t.bit_width - 1) - 1)
        )
        return rng.choice([lo, hi, 0, rng.randint(lo, hi)])
    if pa.types.is_floating(t):
        return rng.choice([0.0, -0.0, 1.5, -3.25, 1e30])
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return rng.choice(["", "x", "é😀", "a" * 40])
    if pa.types.is_fixed_size_binary(t):
        return bytes(rng.randrange(256) for _ in range(t.byte_width))
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return bytes(rng.randrange(256) for _ in range(rng.randrange(5)))
    if pa.types.is_date(t):
        return datetime.date(1970, 1, 1) + datetime.timedelta(days=rng.randint(-1000, 30000))
    if pa.types.is_decimal(t):
        return decimal.Decimal(rng.randint(-(10**9), 10**9)).scaleb(-t.scale)
    if pa.types.is_timestamp(t):
        return rng.randint(-(10**12), 10**12)
    if pa.types.is_duration(t) or pa.types.is_time(t):
        return rng.randint(0, 86_399_999_999)
    if pa.types.is_struct(t):
        return {t.field(i).name: _maybe(t.field(i).type, rng) for i in range(t.num_fields)}
    if pa.types.is_map(t):
        return [(f"k{i}", _maybe(t.item_type, rng)) for i in range(rng.randrange(3))]
    return [_maybe(t.value_type, rng) for _ in range(rng.randrange(4))]


def _maybe(t: pa.DataType, rng: random.Random) -> Any:
    return None if rng.random() < 0.2 else _value(t, rng)


def _column(t: pa.DataType, n: int, rng: random.Random) -> pa.Array:
    values = [_maybe(t, rng) for _ in range(n)]
    if pa.types.is_dictionary(t):
        return pa.array(values, pa.string()).cast(t.value_type).dictionary_encode().cast(t)
    if pa.types.is_timestamp(t) or pa.types.is_duration(t) or pa.types.is_time(t):
        return pa.array(values, pa.int64()).cast(t)
    return pa.array(values, t)


def _stores() -> list[Store]:
    return [pds.open_store("memory://"), Store(MemoryBackend())]


@pytest.mark.spec("R-FUZZ")
@settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    types=st.lists(_types(), min_size=1, max_size=5),
    rows=st.integers(min_value=0, max_value=300),
    seed=st.integers(min_value=0, max_value=2**16),
    max_rows=st.sampled_from([None, 1, 7, 100]),
)
def test_random_schemas_round_trip_or_are_refused(
    types: list[pa.DataType], rows: int, seed: int, max_rows: int | None
) -> None:
    rng = random.Random(seed)
    try:
        table = pa.table({f"c{i}": _column(t, rows, rng) for i, t in enumerate(types)})
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        assume(False)  # pyarrow itself cannot build this data from Python values
        return
    table = table.replace_schema_metadata({"seed": str(seed)})
    for store in _stores():
        ds = pds.ParquetDatasetStore(store, max_rows_per_file=max_rows, row_group_size=rng.choice([None, 5, 64]))
        try:
            ds.write_dataset(table, "t")
        except (TypeError, ValueError, RemoteStoreError):
            continue  # refused with a typed error: fine
        for got in (ds.read_dataset("t", verify=True), ds.iter_batches("t", batch_size=50).read_all()):
            assert got.schema == table.schema, (got.schema, table.schema)
            assert got.to_pylist() == table.to_pylist()
        assert ds.read_schema("t") == table.schema
        # The IPC schema the manifest records parses back to the same schema.
        manifest = json.loads(store.read_bytes("t/manifest.json"))
        assert pds.manifest.schema_from_ipc(manifest["arrow_schema"]) == table.schema
        base64.b64decode(manifest["arrow_schema"])
