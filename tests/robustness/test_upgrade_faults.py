"""Storage faults during a format upgrade (``Table.upgrade``, ``Pipeline.upgrade``),
against SeaweedFS through the fault proxy (tests/fault_proxy.py, fixture ``faulty``).

The fixtures of tests/fixtures/old_formats/ are uploaded as they are, then the
upgrade's commit is faulted on its manifest PUT and on its pointer
compare-and-swap (see test_faults.py for the faults). After each call the
faults are cleared and:

- the call returned (one new version, the upgrade's, exactly once), or raised
  ``pds.CommitUnknown`` (the object is at the version before or the one after),
  or another store error (nothing committed: still in the old format, and it
  reads as before);
- the same upgrade, retried, succeeds, leaves exactly one ``upgrade`` version,
  and a second retry is a no-op;
- the object then takes a write (it is writable).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from test_faults import FAULTS, attempt, confirm, inject, writer_store

import pds

from helpers import files

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "old_formats"
KEYS = {"table": "table-1-unsealed", "pipeline": "pipeline-1-unsealed"}
#: The fixtures' latest versions, and their contents.
OLD_VERSION = {"table": 2, "pipeline": 1}
TABLE_IDS = [i for i in range(15) if i != 3]

pytestmark = [pytest.mark.s3]


def upload(f: Any, key: str) -> None:
    """The fixture *key*, byte for byte, at *key* on the store (straight, no proxy)."""
    for p in sorted((FIXTURES / key).rglob("*")):
        if p.is_file():
            f.direct.write(f"{key}/{p.relative_to(FIXTURES / key).as_posix()}", p.read_bytes())


def opened(kind: str, store: Any) -> Any:
    return (pds.Table if kind == "table" else pds.Pipeline).open(store, KEYS[kind])


def contents(kind: str, obj: Any) -> Any:
    if kind == "table":
        return sorted(obj.to_arrow().column("id").to_pylist())
    return sorted(obj.read("lines").to_pylist(), key=lambda r: r["n"])


def versions(f: Any, kind: str) -> list[int]:
    return [int(Path(k).stem[1:]) for k in files(f.direct, f"{KEYS[kind]}/manifest")]


def upgrades(obj: Any) -> int:
    return [h["operation"] for h in obj.history()].count("upgrade")


@pytest.mark.parametrize("fault", ["fail", "drop_reply", "drop_reply_all"])
@pytest.mark.parametrize("step", ["manifest", "pointer"])
@pytest.mark.parametrize("kind", ["table", "pipeline"])
def test_a_faulted_upgrade_commits_once_or_not_at_all(faulty: Any, kind: str, step: str, fault: str) -> None:
    f = faulty
    key = KEYS[kind]
    old = OLD_VERSION[kind]
    upload(f, key)
    before = contents(kind, opened(kind, f.direct))
    obj = opened(kind, writer_store(f, fault))
    rules = inject(f, step, FAULTS[fault], key=key)
    out = attempt(f, obj.upgrade)
    confirm(f, rules, step)
    what = f"after {out}: "
    now = opened(kind, f.direct)
    if out.kind == "ok":
        assert out.value == old + 1, what
        assert versions(f, kind) == list(range(old + 2)), what
        assert now.version == old + 1 and upgrades(now) == 1, what
    elif out.kind == "unknown":
        assert now.version in (old, old + 1), what
        assert upgrades(now) == now.version - old, what
    else:
        assert versions(f, kind) == list(range(old + 1)), what + "failed, yet committed"
        assert now.version == old and upgrades(now) == 0, what
        with pytest.raises(pds.UpgradeRequired):
            if kind == "table":
                now.append(pa.table({"id": pa.array([99], pa.int64()), "name": ["x"]}))
            else:
                now.compact()
    assert contents(kind, now) == before, what + "the contents changed"
    # Retried without faults: upgraded exactly once; again, a no-op.
    assert opened(kind, f.store).upgrade() == old + 1, what
    assert opened(kind, f.store).upgrade() == old + 1, what
    done = opened(kind, f.direct)
    assert versions(f, kind) == list(range(old + 2)) and upgrades(done) == 1, what
    assert contents(kind, done) == before
    if kind == "table":
        assert before == TABLE_IDS
        done.append(pa.table({"id": pa.array([99], pa.int64()), "name": ["x"]}))
        assert contents(kind, opened(kind, f.direct)) == [*TABLE_IDS, 99]
    else:
        assert done.compact() >= old + 1
