"""Start and stop a real SeaweedFS S3 server for tests.

Self-contained (no pytest import). Typical use from a session fixture::

    sw = SeaweedFS(weed_binary, data_dir)
    sw.start()
    try:
        sw.create_bucket("bucket")
        backend = pds.ObjectStoreBackend("s3://bucket/prefix", **sw.store_options())
        ...
    finally:
        sw.stop()

Everything (master, volume, filer, S3) binds to 127.0.0.1 on freshly picked
ports; each service gets an explicit gRPC port of ``port + 10000`` (the
SeaweedFS convention), and both are checked free. Requests are authenticated
with static credentials from an ``-s3.config`` JSON file. The server logs to
``<data_dir>/weed.log``.

Run ``python tests/seaweed.py [weed_binary]`` to start a server, check
conditional writes and multipart uploads (boto3 and pds), and stop it.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["SeaweedFS", "find_weed"]

_GRPC_OFFSET = 10000


def find_weed() -> str | None:
    """The ``weed`` binary: $WEED_BINARY, next to this interpreter, or on PATH."""
    env = os.environ.get("WEED_BINARY")
    if env:
        return env
    here = Path(sys.executable).parent / "weed"
    if here.is_file():
        return str(here)
    return shutil.which("weed")


def _pick_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """*count* distinct ports p with both p and p + 10000 free on *host*.

    All candidate sockets stay bound until every port is chosen, so the
    chosen ports (and their gRPC twins) never collide with each other.
    """
    # Stay below the kernel's ephemeral range, so an outgoing connection
    # cannot grab a chosen port before weed binds it.
    lo, hi = 20000, 65535 - _GRPC_OFFSET
    with contextlib.suppress(OSError, ValueError):
        eph_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
        if eph_low - _GRPC_OFFSET - 10000 >= 1000:
            lo, hi = 10000, eph_low - _GRPC_OFFSET
    held: list[socket.socket] = []
    ports: list[int] = []
    rng = random.SystemRandom()
    try:
        for _ in range(2000):
            if len(ports) == count:
                break
            p = rng.randrange(lo, hi)
            if p in ports or p + _GRPC_OFFSET in ports or p - _GRPC_OFFSET in ports:
                continue
            pair: list[socket.socket] = []
            try:
                for port in (p, p + _GRPC_OFFSET):
                    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    pair.append(s)
                    s.bind((host, port))
            except OSError:
                for s in pair:
                    s.close()
                continue
            held.extend(pair)
            ports.append(p)
        if len(ports) != count:
            raise RuntimeError(f"could not find {count} free port pairs on {host}")
        return ports
    finally:
        for s in held:
            s.close()


class SeaweedFS:
    """One ``weed server -s3`` process bound to 127.0.0.1."""

    host = "127.0.0.1"

    def __init__(self, weed_binary: str, data_dir: str) -> None:
        """*data_dir* should be fresh (a pytest tmp dir); it is created if missing."""
        weed = str(weed_binary)
        if os.sep in weed:  # relative paths must survive cwd=data_dir
            weed = os.path.abspath(weed)
        self.weed_binary = weed
        self.data_dir = Path(data_dir).resolve()
        self.access_key = "pds-test-access-key"
        self.secret_key = "pds-test-secret-key"
        self.region = "us-east-1"
        self.endpoint = ""
        self.ports: dict[str, int] = {}
        self.command: list[str] = []
        self.log_path = self.data_dir / "weed.log"
        self.startup_seconds: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self._client: Any = None

    # -- lifecycle ---------------------------------------------------------

    def _build_command(self) -> list[str]:
        d = self.data_dir
        master, volume, filer, s3 = _pick_ports(4, self.host)
        self.ports = {"master": master, "volume": volume, "filer": filer, "s3": s3}
        self.endpoint = f"http://{self.host}:{s3}"
        config = d / "s3.json"
        config.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "pds-test",
                            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                        }
                    ]
                },
                indent=2,
            )
        )
        # weed reads master.toml from its cwd (the data dir). Grow one volume
        # per collection (= bucket) instead of 7: bucket creation stays cheap
        # and a test session that makes many buckets keeps few files open.
        (d / "master.toml").write_text("[master.volume_growth]\ncopy_1 = 1\ncopy_2 = 1\ncopy_3 = 1\ncopy_other = 1\n")
        cmd = [
            self.weed_binary,
            "server",
            f"-dir={d / 'data'}",
            f"-ip={self.host}",
            f"-ip.bind={self.host}",
            f"-master.port={master}",
            f"-master.port.grpc={master + _GRPC_OFFSET}",
            "-master.peers=none",  # single-master mode: leader at once, no raft bootstrap wait
            "-master.volumeSizeLimitMB=64",
            "-master.telemetry=false",
            f"-volume.port={volume}",
            f"-volume.port.grpc={volume + _GRPC_OFFSET}",
            "-volume.max=0",
            "-volume.preStopSeconds=0",
            "-filer",
            f"-filer.port={filer}",
            f"-filer.port.grpc={filer + _GRPC_OFFSET}",
            "-s3",
            f"-s3.port={s3}",
            f"-s3.port.grpc={s3 + _GRPC_OFFSET}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={config}",
        ]
        # Unix sockets default to /tmp/seaweedfs-<svc>-<port>.sock; keep them in
        # the data dir unless the path would exceed the sun_path limit.
        for svc, port in (("filer", filer), ("s3", s3)):
            sock = d / f"{svc}-{port}.sock"
            if len(str(sock)) < 100:
                cmd.append(f"-{svc}.localSocket={sock}")
        return cmd

    def start(self, timeout: float = 60) -> None:
        """Start the server and wait until S3 answers an authenticated request.

        Raises RuntimeError (with the log's tail) if the process exits or S3
        does not answer within *timeout* seconds.
        """
        if self._proc is not None:
            raise RuntimeError("SeaweedFS already started")
        # Imported before the server starts, so a missing boto3 cannot leave it running.
        from botocore.exceptions import ClientError

        t0 = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "data").mkdir(exist_ok=True)
        self.command = self._build_command()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        try:
            self._proc = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                start_new_session=True,  # own process group, for stop()
            )
        except BaseException:
            self._cleanup()
            raise
        try:
            client = self.client(connect_timeout=1, read_timeout=5)
        except BaseException:
            self.stop()
            raise
        probe = f"pds-startup-probe-{os.getpid()}"
        deadline = t0 + timeout
        last_error: BaseException | None = None
        while True:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self.stop()
                raise RuntimeError(f"weed exited with code {code} during startup\n{self.log_tail()}")
            try:
                # Bucket create + put + delete exercises master, volume, filer
                # and S3 with an authenticated request.
                try:
                    client.create_bucket(Bucket=probe)
                except ClientError as exc:  # created by an earlier, half-failed round
                    if exc.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
                        raise
                client.put_object(Bucket=probe, Key="probe", Body=b"ok")
                client.delete_object(Bucket=probe, Key="probe")
                client.delete_bucket(Bucket=probe)
                break
            except Exception as exc:  # noqa: BLE001 - anything means "not ready yet"
                last_error = exc
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"SeaweedFS S3 at {self.endpoint} not ready after {timeout}s; last error: {last_error!r}\n"
                    f"{self.log_tail()}"
                )
            time.sleep(0.2)
        self.startup_seconds = time.monotonic() - t0

    def stop(self, grace: float = 2.0) -> None:
        """SIGTERM the process group, wait *grace* seconds, then SIGKILL. Idempotent.

        The grace is short on purpose: weed's filer waits a hard-coded 15 s
        for its gRPC metadata streams on SIGTERM, and the data is throwaway.
        """
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)
        if proc is not None:
            # Children that outlived the leader.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            # weed puts its gRPC unix sockets at a fixed /tmp path (no flag)
            # and removes them only on a graceful stop.
            for svc, port in self.ports.items():
                with contextlib.suppress(OSError):
                    os.unlink(f"/tmp/seaweedfs-{svc}-grpc-{port + _GRPC_OFFSET}.sock")
        self._cleanup()

    def _cleanup(self) -> None:
        self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> SeaweedFS:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"(no log: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    # -- clients -----------------------------------------------------------

    def client(self, **config: Any) -> Any:
        """A new boto3 S3 client for this server (path-style, SigV4)."""
        import boto3
        from botocore.config import Config

        cfg = Config(
            signature_version="s3v4",
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1, "mode": "standard"},
            **config,
        )
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=cfg,
        )

    def create_bucket(self, name: str) -> None:
        if self._client is None:
            self._client = self.client()
        self._client.create_bucket(Bucket=name)

    def store_options(self) -> dict[str, str]:
        """Options for ``pds.ObjectStoreBackend("s3://bucket/prefix", **options)``."""
        return {
            "endpoint": self.endpoint,
            "region": self.region,
            "access_key_id": self.access_key,
            "secret_access_key": self.secret_key,
            "allow_http": "true",
        }


# -- self-check ------------------------------------------------------------


def _check(results: list[tuple[str, bool, str]], name: str, fn: Any) -> None:
    try:
        detail = fn() or ""
        results.append((name, True, str(detail)))
    except Exception as exc:  # noqa: BLE001
        results.append((name, False, f"{type(exc).__module__}.{type(exc).__name__}: {exc}"))


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise AssertionError(message)


def _expect_raise(fn: Any, exc_type: Any, what: str) -> str:
    try:
        fn()
    except exc_type as exc:
        return f"raised {type(exc).__name__}: {str(exc)[:200]}"
    raise AssertionError(f"{what}: no exception raised")


def _boto_status(exc: Any) -> int | None:
    return exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")


def main(argv: list[str]) -> int:
    import tempfile

    weed = argv[1] if len(argv) > 1 else find_weed()
    if not weed:
        print("weed binary not found (pass it as argv[1] or set WEED_BINARY)")
        return 2
    with tempfile.TemporaryDirectory(prefix="seaweed-") as tmp:
        sw = SeaweedFS(weed, tmp)
        sw.start()
        print(f"started in {sw.startup_seconds:.2f}s at {sw.endpoint}")
        print("command:", " ".join(sw.command))
        results: list[tuple[str, bool, str]] = []
        try:
            _run_checks(sw, results)
        finally:
            t = time.monotonic()
            sw.stop()
            print(f"stopped in {time.monotonic() - t:.2f}s")
    width = max((len(n) for n, _, _ in results), default=0)
    for name, ok, detail in results:
        print(f"{'PASS' if ok else 'FAIL'}  {name:<{width}}  {detail}")
    return 0 if all(ok for _, ok, _ in results) else 1


def _run_checks(sw: SeaweedFS, results: list[tuple[str, bool, str]]) -> None:
    from botocore.exceptions import ClientError

    bucket = "pds-check"
    sw.create_bucket(bucket)
    s3 = sw.client()

    # -- boto3 ----------------------------------------------------------
    def boto_if_none_match() -> str:
        s3.put_object(Bucket=bucket, Key="b/inm", Body=b"1", IfNoneMatch="*")
        try:
            s3.put_object(Bucket=bucket, Key="b/inm", Body=b"2", IfNoneMatch="*")
        except ClientError as exc:
            status = _boto_status(exc)
            _require(status == 412, f"expected 412, got {status}: {exc}")
            body = s3.get_object(Bucket=bucket, Key="b/inm")["Body"].read()
            _require(body == b"1", f"object was overwritten: {body!r}")
            return f"second put -> {status} {exc.response['Error'].get('Code')}"
        raise AssertionError("second If-None-Match:* put succeeded (object overwritten)")

    def boto_if_match() -> str:
        e1 = s3.put_object(Bucket=bucket, Key="b/im", Body=b"1")["ETag"]
        e2 = s3.put_object(Bucket=bucket, Key="b/im", Body=b"2", IfMatch=e1)["ETag"]
        try:
            s3.put_object(Bucket=bucket, Key="b/im", Body=b"3", IfMatch=e1)
        except ClientError as exc:
            status = _boto_status(exc)
            _require(status == 412, f"expected 412, got {status}: {exc}")
            body = s3.get_object(Bucket=bucket, Key="b/im")["Body"].read()
            _require(body == b"2", f"object changed: {body!r}")
            return f"fresh etag ok ({e1} -> {e2}); stale -> {status} {exc.response['Error'].get('Code')}"
        raise AssertionError("If-Match with a stale etag succeeded")

    def boto_multipart() -> str:
        part = os.urandom(6 * 1024 * 1024)
        up = s3.create_multipart_upload(Bucket=bucket, Key="b/mp")
        parts = []
        for n in (1, 2):
            r = s3.upload_part(Bucket=bucket, Key="b/mp", UploadId=up["UploadId"], PartNumber=n, Body=part)
            parts.append({"PartNumber": n, "ETag": r["ETag"]})
        s3.complete_multipart_upload(
            Bucket=bucket, Key="b/mp", UploadId=up["UploadId"], MultipartUpload={"Parts": parts}
        )
        body = s3.get_object(Bucket=bucket, Key="b/mp")["Body"].read()
        _require(body == part + part, "multipart content mismatch")
        return f"{len(body)} bytes"

    def boto_bad_credentials() -> str:
        import boto3

        bad = boto3.client(
            "s3",
            endpoint_url=sw.endpoint,
            aws_access_key_id=sw.access_key,
            aws_secret_access_key="wrong-secret",
            region_name=sw.region,
        )
        try:
            bad.list_buckets()
        except ClientError as exc:
            return f"wrong secret -> {_boto_status(exc)} {exc.response['Error'].get('Code')}"
        raise AssertionError("a request signed with a wrong secret key succeeded")

    _check(results, "boto3 wrong secret key rejected", boto_bad_credentials)
    _check(results, "boto3 If-None-Match:* on existing key -> 412", boto_if_none_match)
    _check(results, "boto3 If-Match stale etag -> 412", boto_if_match)
    _check(results, "boto3 multipart upload (2 x 6 MiB)", boto_multipart)

    # -- pds ------------------------------------------------------------
    try:
        import remote_store

        import pds
    except ImportError as exc:
        results.append(("import pds", False, str(exc)))
        return
    backend = pds.ObjectStoreBackend(f"s3://{bucket}/prefix", **sw.store_options())
    rs = backend._rs

    def pds_create() -> str:
        rs.put("k", b"1", mode="create")
        out = _expect_raise(lambda: rs.put("k", b"1b", mode="create"), remote_store.AlreadyExists, "create twice")
        _require(rs.get("k") == b"1", "object was overwritten")
        return out

    def pds_update() -> str:
        stale = rs.head("k").e_tag
        fresh = rs.put("k", b"2", mode="update", e_tag=stale).e_tag
        out = _expect_raise(
            lambda: rs.put("k", b"3", mode="update", e_tag=stale), pds.PreconditionFailed, "stale update"
        )
        _require(rs.get("k") == b"2", "object changed")
        return f"fresh etag ok ({stale} -> {fresh}); stale {out}"

    def pds_multipart() -> str:
        import numpy as np
        import pyarrow as pa

        rng = np.random.default_rng(0)
        rows = 30 * 1024 * 1024 // 8 // 2
        table = pa.table({"a": rng.integers(-(2**62), 2**62, rows), "b": rng.integers(-(2**62), 2**62, rows)})
        store = pds.ParquetDatasetStore(remote_store.Store(backend))
        t = time.monotonic()
        manifest = store.write_dataset(table, "ds")
        wt = time.monotonic() - t
        objs, _ = rs.list("ds", recursive=True)
        sizes = {m.key: m.size for m in objs}
        t = time.monotonic()
        back = store.read_dataset("ds")
        rt = time.monotonic() - t
        _require(back.equals(table), "read_dataset returned different data")
        _require(manifest.row_count == rows, f"manifest row_count {manifest.row_count} != {rows}")
        # A multipart upload's ETag is "<md5-of-part-md5s>-<part count>".
        etag = rs.head("ds/data.parquet").e_tag or ""
        _require("-" in etag and etag.strip('"').rpartition("-")[2].isdigit(), f"not a multipart ETag: {etag}")
        return (
            f"{table.nbytes / 2**20:.0f} MiB table; objects {sizes}; data.parquet ETag {etag}; "
            f"write {wt:.2f}s read {rt:.2f}s"
        )

    _check(results, "pds put create twice -> AlreadyExists", pds_create)
    _check(results, "pds put update stale e_tag -> PreconditionFailed", pds_update)
    _check(results, "pds write_dataset/read_dataset ~30 MB (multipart)", pds_multipart)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
