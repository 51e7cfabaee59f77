"""Progress of long calls on stderr: ``progress=`` on the Python API,
``PDS_PROGRESS``, and ``pds --progress``. Real stores: file:// and
SeaweedFS (S3). Under pytest stderr is not a terminal, so what is checked
is the plain lines (``pds: <call>: <counts>``) that logs get; the terminal
bar is checked with rich told that stderr is one."""

from __future__ import annotations

import datetime
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner
from remote_store import Store

import pds
from pds import Pipeline, Table, _core, _progress
from pds.cli import main
from pds.table import _native

Lake = tuple[str, dict[str, str], Store]
ZERO = datetime.timedelta(0)


@pytest.fixture(params=["file", "s3"])
def lake(request: pytest.FixtureRequest) -> Lake:
    """A fresh file:// or s3:// (SeaweedFS) lake."""
    got: Lake = request.getfixturevalue(f"{request.param}_store")
    return got


@pytest.fixture(autouse=True)
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Progress starts off, whatever the environment running the tests says."""
    monkeypatch.delenv(_progress.ENV, raising=False)


def rows(start: int, stop: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, stop), pa.int64()), "v": [f"r{i}" for i in range(start, stop)]})


def last_line(err: str, what: str) -> str:
    """The line that ends the call *what* (the one saying how long it took)."""
    ends = [line for line in err.splitlines() if line.startswith(f"pds: {what}") and "; done in " in line]
    assert len(ends) == 1, err
    return ends[0]


def test_a_dataset_write_shows_rows_and_parts_reaching_the_total(
    lake: Lake, capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, store = lake
    ds = pds.ParquetDatasetStore(store, max_rows_per_file=200)
    ds.write_dataset(rows(0, 1000), "d", progress=True)
    line = last_line(capsys.readouterr().err, "writing dataset d")
    m = re.match(r"pds: writing dataset d: 1,000/1,000 rows, 5 parts, ([\d.]+ \w+); (\d+) requests", line)
    assert m is not None, line
    written = sum(p.size_bytes for p in ds.read_manifest("d").part_info or [])
    assert m[1] == _progress._size(written) and int(m[2]) > 5


def test_a_stream_write_shows_a_count_without_a_total(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    _, _, store = lake
    ds = pds.ParquetDatasetStore(store, max_rows_per_file=200)
    ds.write_dataset(rows(0, 1000).to_reader(max_chunksize=100), "d", progress=True)
    line = last_line(capsys.readouterr().err, "writing dataset d")
    assert line.startswith("pds: writing dataset d: 1,000 rows, 5 parts, "), line


def test_a_dataset_read_shows_parts_of_the_manifest(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    _, _, store = lake
    ds = pds.ParquetDatasetStore(store, max_rows_per_file=300)
    ds.write_dataset(rows(0, 1000), "d")
    assert capsys.readouterr().err == ""
    assert ds.read_dataset("d", progress=True).num_rows == 1000
    line = last_line(capsys.readouterr().err, "reading dataset d")
    assert line.startswith("pds: reading dataset d: 4/4 parts, 1,000 rows; "), line


def test_compact_and_vacuum_show_their_totals(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    _, _, store = lake
    t = Table.create(store, "t", data=rows(0, 100))
    t.append(rows(100, 200))
    t.delete([("id", "<", 50)])
    t.compact(progress=True)
    line = last_line(capsys.readouterr().err, "compacting table t")
    # Two small files merged: the 150 rows left in them rewritten.
    assert line.startswith("pds: compacting table t: 150/150 rows; "), line
    assert t.to_arrow().num_rows == 150
    removed = t.vacuum(retain=ZERO, min_age=ZERO, dry_run=False, progress=True)
    line = last_line(capsys.readouterr().err, "vacuuming table t")
    assert len(removed) > 3
    assert line.startswith(f"pds: vacuuming table t: {len(removed)}/{len(removed)} objects; "), line


def pipeline(store: Store, delay: float = 0.0, fail: bool = False, key: str = "p") -> Pipeline:
    p = Pipeline.create(store, key, workers=1)
    src = p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})

    @p.stage("double", sources=[src], key={"k": pa.int64()}, value={"w": pa.int64()})
    def double(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, int]]:
        time.sleep(delay)
        if fail:
            raise RuntimeError("no")
        for v in values:
            yield key, 2 * v["v"]

    return p


def test_a_pipeline_update_rebuild_and_compact_show_their_steps(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    _, _, store = lake
    p = pipeline(store)
    p.update({"s": pa.table({"k": [1, 2, 3], "v": [1, 2, 3]})}, progress=True)
    line = last_line(capsys.readouterr().err, "updating pipeline p")
    assert line.startswith("pds: updating pipeline p: 2/2 steps; "), line
    p.rebuild("double", progress=True)
    line = last_line(capsys.readouterr().err, "rebuilding double of pipeline p")
    assert line.startswith("pds: rebuilding double of pipeline p: 2/2 steps; "), line
    p.compact(progress=True)
    line = last_line(capsys.readouterr().err, "compacting pipeline p")
    assert line.startswith("pds: compacting pipeline p: 2/2 steps; "), line
    p.vacuum(retain=ZERO, min_age=ZERO, dry_run=False, progress=True)
    line = last_line(capsys.readouterr().err, "vacuuming pipeline p")
    assert re.match(r"pds: vacuuming pipeline p: (\d+)/\1 objects; ", line), line


def test_plain_lines_while_it_runs_name_the_step(
    file_store: Lake, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off a terminal a line comes every PLAIN_EVERY seconds while the call
    runs: here, during a stage that takes a while, the source done and the
    stage named; and the end line says when a call failed."""
    _, _, store = file_store
    monkeypatch.setattr(_progress, "REFRESH", 0.01)
    monkeypatch.setattr(_progress, "PLAIN_EVERY", 0.05)
    p = pipeline(store, delay=0.5)
    p.update({"s": pa.table({"k": [1], "v": [1]})}, progress=True)
    err = capsys.readouterr().err
    assert re.search(r"^pds: updating pipeline p \(double\): 1/2 steps; .* \(\d+ s\)$", err, re.M), err
    assert last_line(err, "updating pipeline p").startswith("pds: updating pipeline p: 2/2 steps")
    failing = pipeline(store, fail=True, key="q")
    with pytest.raises(RuntimeError):
        failing.update({"s": pa.table({"k": [2], "v": [2]})}, progress=True)
    err = capsys.readouterr().err
    assert re.search(r"^pds: updating pipeline q \(double\): 1/2 steps; .*; failed after [\d.]+ s$", err, re.M), err


def test_nothing_is_shown_unless_asked(
    file_store: Lake, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, store = file_store
    ds = pds.ParquetDatasetStore(store)
    ds.write_dataset(rows(0, 10), "a")
    ds.read_dataset("a")
    t = Table.create(store, "t", data=rows(0, 10))
    t.compact()
    t.vacuum()
    assert capsys.readouterr().err == ""
    monkeypatch.setenv(_progress.ENV, "1")
    ds.write_dataset(rows(0, 10), "b", progress=False)
    ds.read_dataset("b", progress=False)
    t.compact(progress=False)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv(_progress.ENV, "0")
    ds.write_dataset(rows(0, 10), "c")
    assert capsys.readouterr().err == ""


def test_pds_progress_turns_it_on(
    file_store: Lake, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, store = file_store
    monkeypatch.setenv(_progress.ENV, "1")
    ds = pds.ParquetDatasetStore(store)
    ds.write_dataset(rows(0, 10), "d")
    assert last_line(capsys.readouterr().err, "writing dataset d").startswith("pds: writing dataset d: 10/10 rows")
    ds.read_dataset("d")
    assert last_line(capsys.readouterr().err, "reading dataset d").startswith("pds: reading dataset d: 1/1 parts")


def test_a_bad_progress_is_a_type_error_before_any_io(file_store: Lake) -> None:
    _, _, store = file_store
    ds = pds.ParquetDatasetStore(store)
    with pytest.raises(TypeError, match="progress must be"):
        ds.write_dataset(rows(0, 10), "d", progress="yes")  # type: ignore[arg-type]
    assert not ds.dataset_exists("d")
    with pytest.raises(TypeError, match="progress must be"):
        ds.read_dataset("d", progress=1)  # type: ignore[arg-type]  # before the NotFound a read would give


def test_on_a_terminal_a_bar_ends_at_the_total(
    file_store: Lake, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, store = file_store
    # rich draws live bars only on a terminal: say stderr is one.
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("TTY_INTERACTIVE", "1")
    monkeypatch.setenv("COLUMNS", "200")
    ds = pds.ParquetDatasetStore(store, max_rows_per_file=200)
    ds.write_dataset(rows(0, 1000), "d", progress=True)
    err = capsys.readouterr().err
    assert "writing dataset d" in err and "1,000/1,000 rows, 5 parts" in err, err
    assert "pds: " not in err  # no plain lines on a terminal


def test_the_counters_are_read_while_the_call_runs_without_the_gil(file_store: Lake) -> None:
    """A thread reads the counters of a write in flight: they move while
    the write runs (it holds no GIL) and end at the total."""
    _, _, lake = file_store
    store, handle = _native(lake, {})
    counters = _core.Progress()
    assert counters.now() == ("idle", 0, None, 0, 0, 0)
    seen: list[int] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            seen.append(counters.now()[1])
            time.sleep(0.001)

    poller = threading.Thread(target=poll)
    poller.start()
    data = rows(0, 50_000)
    try:
        _core.write_dataset(
            handle,
            store.native_path("e"),
            data,
            dataset_key="e",
            compression="zstd",
            row_group_size=None,
            max_rows_per_file=1000,
            schema_hash="x",
            run_id=None,
            metadata=None,
            total_rows=data.num_rows,
            parallelism=2,
            progress=counters,
        )
    finally:
        done.set()
        poller.join()
    assert counters.now()[:4] == ("writing", 50_000, 50_000, 50)
    assert any(0 < n < 50_000 for n in seen), "no reading saw the write in flight"
    with pytest.raises(ValueError, match="unknown progress phase"):
        counters.start("nope")  # type: ignore[arg-type]


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_the_cli_flag_shows_or_hides_progress(file_store: Lake) -> None:
    url, _, store = file_store
    t = Table.create(store, "t", data=rows(0, 100))
    t.append(rows(100, 200))
    code, out, err = cli("--progress", "compact", url, "t", "--json")
    assert code == 0, err
    assert '"version": 2' in out and "pds:" not in out
    assert last_line(err, "compacting table t").startswith("pds: compacting table t: 200/200 rows"), err
    code, out, err = cli("--progress", "vacuum", url, "t", "--retain", "0s", "--min-age", "0s", "--apply", "--json")
    assert code == 0, err
    assert re.match(r"pds: vacuuming table t: (\d+)/\1 objects", last_line(err, "vacuuming table t")), err
    code, _, err = cli("--progress", "upgrade", url, "t")
    assert code == 0 and last_line(err, "upgrading table t").startswith("pds: upgrading table t: "), err
    t.append(rows(200, 300))
    # Off: with --no-progress, and by default when stderr is no terminal.
    for flags in (["--no-progress"], []):
        code, _, err = cli(*flags, "compact", url, "t")
        assert (code, err) == (0, ""), err
