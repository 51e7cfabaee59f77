"""AWS profiles for ``s3://`` stores: ``profile=`` and ``AWS_PROFILE``,
resolved by botocore from a temporary ``~/.aws`` (``AWS_CONFIG_FILE`` and
``AWS_SHARED_CREDENTIALS_FILE``), against the real SeaweedFS server.

The profiles hold SeaweedFS's keys (or wrong ones, or a
``credential_process`` script that counts its calls in a file); requests
are signed with what botocore resolves, and temporary credentials are
fetched again once they expire.
"""

from __future__ import annotations

import logging
import pickle
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from remote_store import PermissionDenied, Store
from store_kinds import BUCKET

import pds
from pds import _core

ROWS = pa.table({"id": pa.array(range(100), pa.int64()), "x": pa.array([i * 0.5 for i in range(100)])})

#: A credential_process: appends a line to the count file (argv[1]), fails
#: once the file has argv[3] lines (if given), else prints the keys, valid
#: for argv[2] seconds.
PROCESS = """\
import datetime, json, sys
count, seconds = sys.argv[1], float(sys.argv[2])
with open(count, "a") as f:
    f.write("call\\n")
with open(count) as f:
    calls = len(f.readlines())
if len(sys.argv) > 3 and calls >= int(sys.argv[3]):
    sys.exit("the credential process refuses: call %d" % calls)
expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)
print(json.dumps({{
    "Version": 1,
    "AccessKeyId": {key!r},
    "SecretAccessKey": {secret!r},
    "Expiration": expiry.strftime("%Y-%m-%dT%H:%M:%SZ"),
}}))
"""


class Aws:
    """A temporary AWS config dir in the environment."""

    def __init__(self, root: Path, seaweed: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.seaweed = seaweed
        self.monkeypatch = monkeypatch
        self.count = root / "calls"
        script = root / "process.py"
        script.write_text(PROCESS.format(key=seaweed.access_key, secret=seaweed.secret_key))
        process = f"{sys.executable} {script} {self.count}"
        self.config = root / "config"
        self.config.write_text(
            f"[profile p]\nregion = {seaweed.region}\nendpoint_url = {seaweed.endpoint}\n\n"
            f"[profile wrong]\nregion = {seaweed.region}\n\n"
            f"[profile proc]\nregion = {seaweed.region}\ncredential_process = {process} 5\n\n"
            f"[profile proc-hour]\nregion = {seaweed.region}\ncredential_process = {process} 3600\n\n"
            f"[profile proc-fails]\nregion = {seaweed.region}\ncredential_process = {process} 2 2\n"
        )
        self.credentials = root / "credentials"
        self.write_credentials(seaweed.secret_key)
        for name in (
            "AWS_PROFILE",
            "AWS_DEFAULT_PROFILE",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_ENDPOINT_URL",
            "AWS_ENDPOINT_URL_S3",
            "AWS_REGION",
            "AWS_DEFAULT_REGION",
        ):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("AWS_CONFIG_FILE", str(self.config))
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(self.credentials))
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    def write_credentials(self, secret: str) -> None:
        key = self.seaweed.access_key
        self.credentials.write_text(
            f"[p]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n\n"
            f"[wrong]\naws_access_key_id = {key}\naws_secret_access_key = wrong-secret\n"
        )

    def calls(self) -> int:
        return len(self.count.read_text().splitlines()) if self.count.exists() else 0


@pytest.fixture
def aws(tmp_path: Path, seaweed: Any, monkeypatch: pytest.MonkeyPatch) -> Aws:
    return Aws(tmp_path, seaweed, monkeypatch)


def _url() -> str:
    return f"s3://{BUCKET}/{uuid.uuid4().hex}"


def _round_trip(store: Any) -> None:
    ds = pds.ParquetDatasetStore(store, max_rows_per_file=40)
    ds.write_dataset(ROWS, "d")
    assert ds.read_dataset("d", verify=True).equals(ROWS)


def test_a_profile_signs_requests_and_gives_region_and_endpoint(aws: Aws, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    # The endpoint and region come from the profile; the keys from its credentials.
    store = pds.open_store(_url(), profile="p", allow_http=True)
    _round_trip(store)
    # Options win over the profile's settings.
    store = pds.open_store(_url(), profile="p", endpoint=aws.seaweed.endpoint, allow_http=True)
    _round_trip(store)
    assert aws.seaweed.secret_key not in caplog.text
    assert "'p'" in caplog.text  # the DEBUG line names the profile


def test_aws_profile_from_the_environment(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_PROFILE", "p")
    _round_trip(pds.open_store(_url(), allow_http=True))
    # Keys given as options (or in AWS_ACCESS_KEY_ID) win over AWS_PROFILE,
    # which is then not read at all; so do unsigned requests.
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    _round_trip(pds.open_store(_url(), **aws.seaweed.store_options()))
    pds.open_store(_url(), endpoint="http://127.0.0.1:1", skip_signature=True)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", aws.seaweed.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", aws.seaweed.secret_key)
    _round_trip(pds.open_store(_url(), endpoint=aws.seaweed.endpoint, allow_http=True))


def test_wrong_keys_are_refused_on_the_first_request(aws: Aws) -> None:
    store = pds.open_store(_url(), profile="wrong", endpoint=aws.seaweed.endpoint, allow_http=True)
    with pytest.raises(PermissionDenied):
        store.write("k", b"1")


@pytest.mark.parametrize("how", ["option", "environment"])
def test_an_unknown_profile_is_refused_before_any_io(aws: Aws, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    # Port 1: a request there would fail with another error.
    options: dict[str, object] = {"endpoint": "http://127.0.0.1:1", "allow_http": True}
    if how == "option":
        options["profile"] = "no-such-profile"
    else:
        monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    with pytest.raises(ValueError, match="no-such-profile"):
        pds.open_store(_url(), **options)


def test_profile_with_keys_is_refused(aws: Aws) -> None:
    with pytest.raises(ValueError, match="not both"):
        pds.open_store(_url(), profile="p", access_key_id="a", secret_access_key="b")


def test_profile_without_botocore(aws: Aws, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "botocore", None)  # import botocore now fails
    with pytest.raises(ImportError, match=r"pds\[aws\]"):
        pds.open_store(_url(), profile="p", endpoint="http://127.0.0.1:1")
    # AWS_PROFILE alone: not read (as before profiles were supported), said at DEBUG.
    caplog.set_level(logging.DEBUG, logger="pds.store")
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    store = pds.open_store(_url(), endpoint="http://127.0.0.1:1", allow_http=True)
    assert store.unwrap(pds.ObjectStoreBackend).scheme == "s3"
    assert "AWS_PROFILE=no-such-profile is not read" in caplog.text


def test_temporary_credentials_are_fetched_again_after_expiry(aws: Aws) -> None:
    store = pds.open_store(_url(), profile="proc", endpoint=aws.seaweed.endpoint, allow_http=True)
    store.write("a", b"1")
    before = aws.calls()
    assert before >= 1
    time.sleep(5.5)  # the credentials expire 4 to 5 s after each call
    store.write("b", b"2")
    assert aws.calls() > before
    assert store.read_bytes("a") == b"1"


def test_credentials_valid_for_long_are_not_fetched_per_request(aws: Aws) -> None:
    store = pds.open_store(_url(), profile="proc-hour", endpoint=aws.seaweed.endpoint, allow_http=True)
    for i in range(10):
        store.write(f"k{i}", b"x")
    assert aws.calls() == 1


def test_a_failing_refresh_is_permission_denied(aws: Aws) -> None:
    # The process succeeds once (when the store is opened), then refuses.
    store = pds.open_store(_url(), profile="proc-fails", endpoint=aws.seaweed.endpoint, allow_http=True)
    with pytest.raises(PermissionDenied, match="credential process refuses"):
        store.write("k", b"1")


def test_pickles_carry_the_profile_name_and_no_secret(aws: Aws, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    url = _url()
    store = pds.open_store(url, profile="p", allow_http=True)
    store.write("k", b"1")
    backend = store.unwrap(pds.ObjectStoreBackend)
    secret = aws.seaweed.secret_key.encode()
    for obj in (backend, backend.unwrap(_core.RustStore)):
        data = pickle.dumps(obj)
        assert secret not in data
        assert aws.seaweed.secret_key not in repr(obj)
    assert backend.options == {"profile": "p", "allow_http": "true"}
    # An unpickled copy resolves the profile again, from its own ~/.aws.
    clone = pickle.loads(pickle.dumps(backend))
    assert Store(clone).read_bytes("k") == b"1"
    aws.write_credentials("not-the-secret")
    for obj in (backend, backend.unwrap(_core.RustStore)):
        clone = pickle.loads(pickle.dumps(obj))
        with pytest.raises(PermissionDenied):
            (clone.get("k") if isinstance(clone, _core.RustStore) else Store(clone).read_bytes("k"))
    assert aws.seaweed.secret_key not in caplog.text
