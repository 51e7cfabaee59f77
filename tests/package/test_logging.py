"""pds's log events reach Python's ``logging`` under the logger ``pds``.

INFO: one line per table commit (``pds.table``), dataset write
(``pds.dataset``) and pipeline update (``pds.pipeline``). DEBUG: each store
request (``pds.store``). Real stores: file:// and SeaweedFS (S3).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from remote_store import Store

import pds
from pds import Pipeline, Table, _progress

Lake = tuple[str, dict[str, str], Store]


@pytest.fixture(params=["file", "s3"])
def lake(request: pytest.FixtureRequest) -> Lake:
    """A fresh file:// or s3:// (SeaweedFS) lake."""
    got: Lake = request.getfixturevalue(f"{request.param}_store")
    return got


@pytest.fixture
def debug(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """caplog capturing pds's loggers at DEBUG, the Rust side told so."""
    caplog.set_level(logging.DEBUG, logger="pds")
    pds.reset_log_cache()
    yield caplog
    pds.reset_log_cache()


def lines(caplog: pytest.LogCaptureFixture, logger: str, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and r.levelno == level]


def rows(start: int, stop: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, stop), pa.int64()), "v": [f"r{i}" for i in range(start, stop)]})


COMMIT = re.compile(
    r"table (?P<key>\S+): (?P<op>\w+) committed version (?P<version>\d+) \((?P<params>[^)]*)\): "
    r"(?P<written>\d+) bytes written, (?P<read>\d+) bytes read, (?P<requests>\d+) requests, [\d.]+ ms"
)


def test_a_table_create_and_append_log_their_commits_and_each_request(
    lake: Lake, debug: pytest.LogCaptureFixture
) -> None:
    _, _, store = lake
    t = Table.create(store, "t", data=rows(0, 3))
    debug.clear()
    t.append(rows(3, 5))
    commits = [COMMIT.fullmatch(m) for m in lines(debug, "pds.table", logging.INFO)]
    assert len(commits) == 1 and commits[0] is not None, lines(debug, "pds.table", logging.INFO)
    c = commits[0]
    assert (c["key"], c["op"], c["version"]) == ("t", "append", "1")
    assert "rows_added=2" in c["params"] and "files_added=1" in c["params"]
    requests = lines(debug, "pds.store", logging.DEBUG)
    # The append's requests, each logged once: 2 GETs (pointer, manifest), the
    # data PUT, the segment and manifest PUTs, the pointer PUT, and what the
    # store needs around them.
    assert int(c["requests"]) == len(requests) >= 5, requests
    assert any(re.match(r"PUT \S*t/data/part-\S+\.parquet: ok, \d+ bytes", m) for m in requests), requests
    assert any(re.match(r"PUT (create-only|if-match) \S*t/manifest/v00000001\.json: ok", m) for m in requests)
    assert int(c["written"]) > 0


def test_create_logs_version_zero_with_its_rows(lake: Lake, debug: pytest.LogCaptureFixture) -> None:
    _, _, store = lake
    Table.create(store, "t", data=rows(0, 7))
    (line,) = lines(debug, "pds.table", logging.INFO)
    c = COMMIT.fullmatch(line)
    assert c is not None and (c["op"], c["version"]) == ("create", "0"), line
    assert "rows_added=7" in c["params"]


def test_deletes_and_compaction_log_their_commits(file_store: Lake, debug: pytest.LogCaptureFixture) -> None:
    _, _, store = file_store
    t = Table.create(store, "t", data=rows(0, 10))
    t.append(rows(10, 20))
    debug.clear()
    t.delete([("id", "<", 5)])
    t.compact()
    ops = [(m["op"], m["version"]) for m in map(COMMIT.fullmatch, lines(debug, "pds.table", logging.INFO)) if m]
    assert ops == [("delete", "2"), ("compact", "3")], debug.text


def test_a_dataset_write_logs_one_info_line(lake: Lake, debug: pytest.LogCaptureFixture) -> None:
    _, _, store = lake
    ds = pds.ParquetDatasetStore(store, max_rows_per_file=40)
    ds.write_dataset(rows(0, 100), "d")
    (line,) = lines(debug, "pds.dataset", logging.INFO)
    m = re.fullmatch(
        r"dataset d: wrote 3 parts, 100 rows: (\d+) bytes written, \d+ bytes read, (\d+) requests, [\d.]+ ms", line
    )
    assert m is not None, line
    # The line counts the write from its claim on the key (`_WRITING`) on;
    # the Python layer's check that no dataset is there comes before.
    requests = lines(debug, "pds.store", logging.DEBUG)
    claim = next(i for i, r in enumerate(requests) if re.match(r"PUT create-only \S*d/_WRITING: ok", r))
    assert int(m[2]) == len(requests[claim:]), requests
    assert sum(bool(re.match(r"PUT create-only \S*d/part-\S+: ok", r)) for r in requests) == 3, requests


def test_a_pipeline_update_logs_one_info_line(lake: Lake, debug: pytest.LogCaptureFixture) -> None:
    _, _, store = lake
    p = Pipeline.create(store, "p")
    src = p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})

    @p.stage("double", sources=[src], key={"k": pa.int64()}, value={"w": pa.int64()})
    def double(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, int]]:
        for v in values:
            yield key, 2 * v["v"]

    p.update({"s": pa.table({"k": [1, 2, 3], "v": [1, 2, 3]})})
    debug.clear()
    version = p.update({"s": pa.table({"k": [2], "v": [20]})})
    (line,) = lines(debug, "pds.pipeline", logging.INFO)
    m = re.fullmatch(
        r"pipeline p: update committed version (\d+) \(source s: 1 upserts, 0 deletes; "
        r"stage double: (\d+) rows in, (\d+) out\): (\d+) requests, [\d.]+ ms",
        line,
    )
    assert m is not None, line
    assert int(m[1]) == version and int(m[4]) > 0


def test_a_normal_run_logs_nothing_at_warning(lake: Lake, debug: pytest.LogCaptureFixture) -> None:
    _, _, store = lake
    debug.set_level(logging.DEBUG)  # every logger, not only pds's
    t = Table.create(store, "t", data=rows(0, 50))
    t.append(rows(50, 60))
    assert t.to_arrow().num_rows == 60
    ds = pds.ParquetDatasetStore(store)
    ds.write_dataset(rows(0, 10), "d")
    assert ds.read_dataset("d").num_rows == 10
    assert lines(debug, "pds.table", logging.INFO), "logging is on"
    loud = [(r.name, r.getMessage()) for r in debug.records if r.levelno >= logging.WARNING]
    assert loud == []


def test_a_level_change_takes_effect_after_reset(file_store: Lake, caplog: pytest.LogCaptureFixture) -> None:
    _, _, store = file_store
    caplog.set_level(logging.WARNING, logger="pds")
    pds.reset_log_cache()
    try:
        t = Table.create(store, "t", data=rows(0, 3))
        assert [r for r in caplog.records if r.name.startswith("pds")] == []
        caplog.set_level(logging.INFO, logger="pds")
        pds.reset_log_cache()
        t.append(rows(3, 4))
        assert len(lines(caplog, "pds.table", logging.INFO)) == 1
        assert lines(caplog, "pds.store", logging.DEBUG) == [], "DEBUG is still off"
        caplog.set_level(logging.DEBUG, logger="pds.store")
        pds.reset_log_cache()
        t.append(rows(4, 5))
        assert lines(caplog, "pds.store", logging.DEBUG), "DEBUG of pds.store is on now"
    finally:
        pds.reset_log_cache()


def test_debug_logging_from_runtime_threads_never_deadlocks(lake: Lake, debug: pytest.LogCaptureFixture) -> None:
    """Events logged by the runtime's threads take the GIL; pds waits for
    them with the GIL released. A multi-part dataset write and a table scan
    run in two Python threads at once, while a third keeps the interpreter
    busy, all logging at DEBUG through a handler that takes a lock."""
    _, _, store = lake
    t = Table.create(store, "t", data=rows(0, 2000), row_group_size=100, target_file_size=2000)
    seen: list[str] = []
    handler_lock = threading.Lock()

    class Slow(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            with handler_lock:
                seen.append(record.getMessage())

    handler = Slow(logging.DEBUG)
    logging.getLogger("pds").addHandler(handler)
    errors: list[BaseException] = []
    stop = threading.Event()

    def guarded(f: Any) -> Any:
        def run() -> None:
            try:
                f()
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        return run

    def write() -> None:
        ds = pds.ParquetDatasetStore(store, max_rows_per_file=100)
        for i in range(3):
            ds.write_dataset(rows(0, 1000), f"d{i}", overwrite=True)

    def scan() -> None:
        for _ in range(3):
            assert sum(b.num_rows for b in t.scan(batch_size=50)) == 2000

    def busy() -> None:
        n = 0
        while not stop.is_set():
            n += 1

    try:
        workers = [threading.Thread(target=guarded(f)) for f in (write, scan)]
        spinner = threading.Thread(target=busy)
        spinner.start()
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=240)
        stop.set()
        spinner.join()
        assert not any(w.is_alive() for w in workers), "a pds call hung while logging"
    finally:
        logging.getLogger("pds").removeHandler(handler)
    assert errors == []
    assert any(m.startswith("GET range") for m in seen) and any("wrote 10 parts" in m for m in seen)


def test_progress_is_off_unless_asked(file_store: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    _, _, store = file_store
    pds.ParquetDatasetStore(store).write_dataset(rows(0, 10), "d")
    assert capsys.readouterr().err == ""


def test_pds_progress_shows_a_long_call_with_its_requests(
    lake: Lake, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With PDS_PROGRESS=1, a dataset write and a pipeline update show a live
    line on stderr naming the call and counting its store requests."""
    _, _, store = lake
    monkeypatch.setenv("PDS_PROGRESS", "1")
    # rich draws live lines only on a terminal: say stderr is one.
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("TTY_INTERACTIVE", "1")
    monkeypatch.setenv("COLUMNS", "200")  # wide enough for the whole line
    monkeypatch.setattr(_progress, "REFRESH", 0.005)
    ds = pds.ParquetDatasetStore(store, max_rows_per_file=2_000)
    started = time.perf_counter()
    ds.write_dataset(rows(0, 100_000), "d")
    took = time.perf_counter() - started
    shown = capsys.readouterr().err
    # A redraw: the call, then its counts (rows of the total, parts) and requests.
    counted = [int(n) for n in re.findall(r"writing dataset d\b[^\r\n]*?rows, \d+ parts, [^;]*; (\d+) requests", shown)]
    if took > 0.05:  # long enough for a refresh: it counted requests
        assert counted and max(counted) > 0, shown
    assert ds.read_dataset("d").num_rows == 100_000
    assert "reading dataset d" in capsys.readouterr().err


def test_an_http_retry_is_logged_at_debug_under_pds_store(faulty: Any, debug: pytest.LogCaptureFixture) -> None:
    """The HTTP client's own retry (object_store's) of a GET answered 503:
    the read succeeds, and ``pds.store`` has one ``HTTP retry:`` line at
    DEBUG naming the status and the retry's number; nothing of it reaches
    another logger or WARNING."""
    faulty.direct.write("x.bin", b"hello")
    faulty.proxy.fail("GET", r"/x\.bin$", status=503, times=1)
    assert faulty.store.read_bytes("x.bin") == b"hello"
    assert len(faulty.proxy.requests("GET", r"/x\.bin$")) == 2
    retries = [m for m in lines(debug, "pds.store", logging.DEBUG) if m.startswith("HTTP retry:")]
    assert len(retries) == 1, retries
    assert "503" in retries[0] and "retry 1 of 2" in retries[0], retries
    assert not [r for r in debug.records if r.name.startswith("object_store") or r.levelno >= logging.WARNING]
    # No fault, no retry line.
    debug.clear()
    assert faulty.store.read_bytes("x.bin") == b"hello"
    assert not [m for m in lines(debug, "pds.store", logging.DEBUG) if m.startswith("HTTP retry:")]
