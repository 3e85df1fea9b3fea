"""optimize(), the reader and the CLI on Google Cloud Storage and Azure Blob (fake-gcs-server
and Azurite, tests/support/cloudemulators.py), with real kills, real pauses and a
fault-injecting proxy: the S3 system tests that matter, run on each cloud.

Every run ends with every sample exactly once, in input order; a checkpoint never names an
object that is not in the store; errors name the container and endpoint, never a secret.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import time
from typing import Any

import numpy as np
import pytest

from shardwright import CombinedStreamingDataset, StorageError, StreamingDataLoader, StreamingDataset, optimize
from shardwright.cli.main import main as cli
from shardwright.protocol.layout import HISTORY_PREFIX, INPUTS_PREFIX, RUN_RECORD_KEY, STATE_DIR
from shardwright.storage import open_storage
from support.cloudemulators import AZURITE_ACCOUNT, AZURITE_KEY
from support.crash_child import expected, generator, plain
from support.faultproxy import FaultProxy
from support.fencing import check_round, held, pause_and_take_over
from support.helpers import (
    assert_attempts_are_the_failed_requests,
    assert_exactly_once,
    chunks_named_but_missing,
    counted_store_requests,
    finish,
    kill_loop,
)

CLOUDS = [pytest.param("gcs", marks=pytest.mark.gcs), pytest.param("azure", marks=pytest.mark.azure)]


@dataclasses.dataclass
class Cloud:
    name: str
    url: str  # a fresh, empty location
    options: dict
    server: Any

    def proxied_options(self, proxy: FaultProxy) -> dict:
        """Options that send every request through ``proxy``."""
        if self.name == "gcs":
            return {"api_endpoint": proxy.endpoint}
        conn = self.server.connection_string.replace(self.server.endpoint, proxy.endpoint)
        return {"connection_string": conn}


@pytest.fixture(params=CLOUDS)
def cloud(request) -> Cloud:
    name = request.param
    return Cloud(
        name,
        request.getfixturevalue(f"{name}_url"),
        request.getfixturevalue(f"{name}_storage_options"),
        request.getfixturevalue(f"{name}_server"),
    )


@pytest.fixture
def proxy(cloud):
    proxy = FaultProxy(cloud.server.endpoint.split("://", 1)[1], seed=int.from_bytes(os.urandom(4), "little")).start()
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture(autouse=True)
def private_reader_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SHARDWRIGHT_CACHE_DIR", str(tmp_path / "reader-cache"))


def assert_clean_finish(url: str, options: dict) -> None:
    """Published, no run state left, and no chunk object index.json does not name."""
    storage = open_storage(url, options)
    keys = storage.list("")
    named = {c["filename"] for c in json.loads(storage.read_bytes("index.json"))["chunks"]}
    chunks = {k for k in keys if k.startswith("chunk-")}
    assert chunks == named, f"orphan chunks {sorted(chunks - named)[:5]}, missing {sorted(named - chunks)[:5]}"
    kept = (HISTORY_PREFIX, INPUTS_PREFIX)  # what a finished run keeps: run.json, input identities, history
    state = [k for k in keys if k.startswith(STATE_DIR + "/") and k != RUN_RECORD_KEY and not k.startswith(kept)]
    assert state == [], state


# --- optimize ------------------------------------------------------------------------------------


def test_optimize_roundtrip_and_rerun(cloud):
    n = 200
    result = optimize(
        generator,
        list(range(n)),
        cloud.url,
        chunk_size=9,
        compression="zstd",
        num_workers=2,
        storage_options=cloud.options,
        verbose=False,
    )
    assert result.published and result.items == len(expected("generator", n))
    ds = StreamingDataset(cloud.url, storage_options=cloud.options)
    assert [(x["i"], x.get("j", 0)) for x in ds] == expected("generator", n)
    assert_clean_finish(cloud.url, cloud.options)
    again = optimize(
        generator, list(range(n)), cloud.url, chunk_size=9, compression="zstd", num_workers=2,
        storage_options=cloud.options, verbose=False,
    )  # fmt: skip
    assert again.items == 0 and again.published


def test_on_error_skip_with_timeout_then_the_same_call_retries(cloud, monkeypatch):
    monkeypatch.setenv("CRASH_FAIL_AT", "11")  # support.crash_child.plain raises on input 11
    call = dict(chunk_size=4, num_workers=1, on_error="skip", timeout=30, storage_options=cloud.options, verbose=False)
    result = optimize(plain, list(range(20)), cloud.url, **call)
    assert result.published and result.failed == 1
    assert [x["i"] for x in StreamingDataset(cloud.url, storage_options=cloud.options)] == list(range(20))[:11] + list(
        range(12, 20)
    )
    monkeypatch.delenv("CRASH_FAIL_AT")  # "fixed": the next run of the same call retries input 11
    again = optimize(plain, list(range(20)), cloud.url, **call)
    assert again.published and again.failed == 0
    ids = sorted(int(x["i"]) for x in StreamingDataset(cloud.url, storage_options=cloud.options))
    assert ids == list(range(20))


def test_random_sigkill_loop(cloud):
    """SIGKILL the whole process group at random moments; every resume continues."""
    rng = random.Random(f"{cloud.name}-kill-loop")
    config = {
        "kind": "generator",
        "n": 700,
        "chunk_size": 7,
        "sleep": 0.002,
        "output_dir": cloud.url,
        "storage_options": cloud.options,
    }
    checked = []

    def check():
        records, missing = chunks_named_but_missing(cloud.url, cloud.options)
        assert missing == [], f"commit records name chunks missing from the store: {missing[:5]}"
        checked.append(records)

    kills = kill_loop(config, rng, kills_wanted=5, check=check)
    assert kills >= 3, f"only {kills} kills landed: the workload is too small to test anything"
    assert max(checked) > 0, "no kill landed after a commit: the loop tested nothing"
    config["num_workers"] = 2
    finish(config)
    assert_exactly_once(config, cloud.options)
    assert_clean_finish(cloud.url, cloud.options)


@pytest.mark.slow
def test_paused_writer_is_fenced(cloud, tmp_path):
    """SIGSTOP past the lease TTL, a takeover, SIGCONT: the store's own conditional writes
    (ifGenerationMatch / If-Match) keep the paused writer from damaging what B publishes."""
    rng = random.Random(f"fencing-{cloud.name}")
    config = {
        "kind": "stamped",
        "n": 500,
        "chunk_bytes": 400,
        "sleep": 0.01,
        "num_workers": 2,
        "output_dir": cloud.url,
        "storage_options": cloud.options,
    }
    config = held(config, tmp_path / "gate")
    check_round(config, cloud.options, pause_and_take_over(config, rng, cloud.options))


# --- the store through a flaky network ------------------------------------------------------------


def test_flaky_network_completes_with_correct_bytes(cloud, proxy, tmp_path):
    options = dict(cloud.proxied_options(proxy), retry_timeout=60)
    s = open_storage(cloud.url, options)
    s.check()
    # every kind at least once (forced on the first requests), then at random
    proxy.configure(p_503=0.15, p_reset=0.1, p_truncate=0.1, next_faults=["503", "reset", "truncate", "reset_after"])
    blobs = {f"d/k{i}": os.urandom(40_000 + i) for i in range(6)}
    for k, v in blobs.items():
        s.write_bytes(k, v)
        assert s.create_exclusive(k + ".claim", k.encode()) is True
        assert s.create_exclusive(k + ".claim", b"other") is False
        assert s.read_bytes(k) == v
        fetched = tmp_path / k.replace("/", "_")
        s.download_to(k, str(fetched))  # the reader's way in: its own GET on GCS, checked by CRC32C
        assert fetched.read_bytes() == v
    proxy.configure(next_faults=["truncate", "reset", "503"])  # one download through each, in turn
    cut = tmp_path / "cut"
    s.download_to("d/k1", str(cut))
    assert cut.read_bytes() == blobs["d/k1"]
    _, version = s.read_versioned("d/k0")
    assert s.replace_if_version("d/k0", b"new", version) is True
    assert s.replace_if_version("d/k0", b"newer", version) is False
    assert s.list("d/") == sorted(list(blobs) + [k + ".claim" for k in blobs])
    stats = dict(proxy.stats)
    assert stats.get("503") and stats.get("truncate") and stats.get("reset", 0) + stats.get("reset_after", 0), stats
    proxy.configure(p_503=0, p_reset=0, p_truncate=0)
    s.delete_prefix("d/")
    assert s.list() == []


@pytest.mark.gcs
def test_a_gzip_encoded_object_reads_back_decoded_on_gcs(gcs_url, gcs_server, tmp_path):
    """An object another tool stored with Content-Encoding gzip (an input file): the store
    serves it decoded, and its x-goog-hash is of the stored bytes, so our own GET cannot check
    it; the SDK's download (which decodes it, as before) takes it instead of a retry loop."""
    import gzip

    bucket, prefix = gcs_url[len("gs://") :].split("/", 1)
    blob = gcs_server.client().bucket(bucket).blob(f"{prefix}/user/notes.txt")
    blob.content_encoding = "gzip"
    blob.upload_from_string(gzip.compress(b"hello " * 1000), content_type="text/plain")
    s = open_storage(gcs_url, {"retry_timeout": 2})  # a checksum retry loop would fail in 2 s
    assert s.read_bytes("user/notes.txt") == b"hello " * 1000
    s.download_to("user/notes.txt", str(tmp_path / "notes.txt"))
    assert (tmp_path / "notes.txt").read_bytes() == b"hello " * 1000


def test_lost_reply_of_a_conditional_write_is_not_a_lost_race(cloud, proxy):
    """The store applies our create but the reply is lost: the retry's refusal counts as ours."""
    s = open_storage(cloud.url, cloud.proxied_options(proxy))
    s.check()
    proxy.configure(next_faults=["reset_after"])
    assert s.create_exclusive("claim", b"run-1") is True
    assert proxy.stats["reset_after"] == 1
    _, version = s.read_versioned("claim")
    proxy.configure(next_faults=["reset_after"])
    assert s.replace_if_version("claim", b"run-1 renewed", version) is True
    assert s.create_exclusive("claim", b"run-2") is False
    assert s.read_bytes("claim") == b"run-1 renewed"


@pytest.mark.parametrize("size", [50_000, 9 * 1024 * 1024])
def test_a_body_flipped_in_flight_is_never_left_stored(cloud, proxy, size):
    """One bit of an upload flipped in flight. Azure (Azurite too) refuses it by its
    Content-MD5 and we retry; fake-gcs-server stores it (real GCS would refuse it by its CRC32C),
    and our comparison of the stored object's CRC32C with ours rewrites it. Either way what is
    left is exactly our bytes."""
    options = dict(cloud.proxied_options(proxy))
    if cloud.name == "azure":
        options.update(max_single_put_size=4 * 1024 * 1024, max_block_size=4 * 1024 * 1024)  # blocks above 4 MiB
    s = open_storage(cloud.url, options)
    s.check()
    data = os.urandom(size)
    proxy.configure(methods={"PUT", "POST"}, next_faults=["corrupt_body"])
    s.write_bytes("chunk-0-00000-000000.bin", data)
    assert proxy.stats["corrupt_body"] == 1, "the fault was injected"
    assert s.read_bytes("chunk-0-00000-000000.bin") == data


def test_conditional_writes_in_parts_are_enforced(cloud):
    """Above the SDK's single-request size (GCS 8 MiB; Azure set to 4 MiB here: Put Block List)
    a conditional write still holds for the loser (GCS: always one multipart request, the path
    fake-gcs-server enforces)."""
    options = dict(cloud.options)
    if cloud.name == "azure":
        options.update(max_single_put_size=4 * 1024 * 1024, max_block_size=4 * 1024 * 1024)
    s = open_storage(cloud.url, options)
    first, second = os.urandom(9 * 1024 * 1024), os.urandom(9 * 1024 * 1024)
    assert s.create_exclusive("big", first) is True
    assert s.create_exclusive("big", second) is False
    assert s.read_bytes("big") == first
    _, version = s.read_versioned("big")
    assert s.replace_if_version("big", second, version) is True
    assert s.replace_if_version("big", first, version) is False  # stale: refused
    assert s.read_bytes("big") == second


def test_persistent_failure_is_one_clear_error(cloud, proxy):
    s = open_storage(cloud.url, dict(cloud.proxied_options(proxy), retry_timeout=2))
    s.check()
    # Only the write's requests fail, and only they are counted: google-cloud-storage also
    # sends bucket metadata lookups (GET) from a background thread of the same client, through
    # the same proxy (seen: 5 attempts, 7 requests failed when those were counted too).
    # GCS: one multipart upload to the bucket's upload path (the object is named in the body);
    # Azure: one Put Blob to the object's path
    write, path = ("POST", "/o") if cloud.name == "gcs" else ("PUT", "/k")
    proxy.configure(p_503=1.0, methods={write})
    with pytest.raises(StorageError) as info:
        s.write_bytes("k", b"x")
    message = str(info.value)
    assert "kept failing" in message and proxy.endpoint in message and "rerun the same call" in message, message
    assert_attempts_are_the_failed_requests(message, proxy.failed("503", write, path))


# --- the reader ------------------------------------------------------------------------------------

ROWS = 1000


def array_item(i: int) -> dict:
    return {"i": i, "a": np.full(ROWS, i % 251, dtype=np.uint8)}


def make_dataset(url: str, options: dict, n: int = 400) -> None:
    optimize(array_item, list(range(n)), url, chunk_size=25, num_shards=4, num_workers=2, storage_options=options,
             verbose=False)  # fmt: skip


def dir_bytes(root) -> int:
    total = 0
    for base, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.stat(os.path.join(base, name)).st_size
            except FileNotFoundError:
                pass
    return total


def test_reader_small_cache_bound_and_dataloader(cloud, tmp_path):
    make_dataset(cloud.url, cloud.options)
    root = tmp_path / "cache"
    limit = 110_000  # about 4 of the 16 chunks
    ds = StreamingDataset(cloud.url, storage_options=cloud.options, cache_dir=root, max_cache_bytes=limit)
    largest = max(c.chunk_bytes for c in ds.chunks)
    peak = 0
    for i, item in enumerate(ds):
        assert item["i"] == i and int(np.asarray(item["a"])[0]) == i % 251
        peak = max(peak, dir_bytes(root))
    assert peak <= limit + largest, f"cache grew to {peak} bytes, bound {limit} (+ one chunk {largest})"
    loader = StreamingDataLoader(
        StreamingDataset(cloud.url, storage_options=cloud.options, cache_dir=root, max_cache_bytes=limit),
        batch_size=16,
        num_workers=2,
    )
    seen = sorted(int(i) for batch in loader for i in batch["i"])
    assert seen == list(range(400))


def test_prefetch_from_the_plan_hides_latency(cloud, proxy, tmp_path):
    """Every request 50 ms slower (through the proxy): the plan-driven prefetcher downloads the
    next window's chunks while items are consumed, so reads after the warm-up do not wait."""
    chunks, per_chunk = 24, 20
    optimize(array_item, list(range(chunks * per_chunk)), cloud.url, chunk_size=per_chunk, num_shards=4,
             num_workers=2, storage_options=cloud.options, verbose=False)  # fmt: skip
    proxy.configure(latency=0.05)
    chunk = per_chunk * (ROWS + 100)
    limit = 16 * chunk
    ds = StreamingDataset(cloud.url, storage_options=cloud.proxied_options(proxy), cache_dir=tmp_path / "cache",
                          max_cache_bytes=limit, shuffle=True, seed=2, shuffle_window=4, prefetch=4, iterable=True)  # fmt: skip
    seen = []
    for item in ds:
        seen.append(int(item["i"]))
        time.sleep(0.003)  # a training step: the next window's downloads overlap it
    assert sorted(seen) == list(range(chunks * per_chunk))
    waits = ds._source.cache.reader_waits
    assert waits <= 6, f"{waits} reads waited for a download"
    assert dir_bytes(tmp_path / "cache") <= limit + 2 * chunk


@pytest.mark.gcs
@pytest.mark.azure
def test_combined_dataset_over_both_clouds(gcs_url, gcs_storage_options, azure_url, azure_storage_options, tmp_path):
    make_dataset(gcs_url, gcs_storage_options, n=100)
    make_dataset(azure_url, azure_storage_options, n=60)
    combined = CombinedStreamingDataset(
        [
            StreamingDataset(gcs_url, storage_options=gcs_storage_options, cache_dir=tmp_path / "c"),
            StreamingDataset(azure_url, storage_options=azure_storage_options, cache_dir=tmp_path / "c"),
        ]
    )  # an epoch reads every item of each dataset once
    ids = sorted(int(x["i"]) for x in combined)
    assert ids == sorted(list(range(100)) + list(range(60)))


def test_reader_cache_keys_include_the_account(azure_server, azure_url, tmp_path):
    """Two Azure accounts can hold the same az://container/prefix: their caches never mix."""
    make_dataset(azure_url, azure_server.storage_options, n=30)
    a = StreamingDataset(azure_url, storage_options=azure_server.storage_options, cache_dir=tmp_path / "c")
    assert a[0]["i"] == 0
    other = azure_server.connection_string.replace(f"/{AZURITE_ACCOUNT}", "/otheraccount").replace(
        f"AccountName={AZURITE_ACCOUNT}", "AccountName=otheraccount"
    )
    storage = open_storage(azure_url, {"connection_string": other})
    assert storage.endpoint != open_storage(azure_url, azure_server.storage_options).endpoint


# --- the CLI -------------------------------------------------------------------------------------------


def test_cli_status_history_verify_runs_merge_clean(cloud, capsys):
    opts = json.dumps(cloud.options)
    n = 40
    result = optimize(plain, list(range(n)), cloud.url, chunk_size=5, num_workers=1, num_nodes=2, node_rank=0,
                      storage_options=cloud.options, verbose=False)  # fmt: skip
    assert not result.published
    capsys.readouterr()
    assert cli(["merge", cloud.url, "--storage-options", opts]) == 1  # node 1's shards are pending
    assert cli(["status", cloud.url, "--storage-options", opts]) in (0, 1)
    out = capsys.readouterr().out
    assert cloud.url in out or "running" in out or "interrupted" in out, out
    optimize(plain, list(range(n)), cloud.url, chunk_size=5, num_workers=1, num_nodes=2, node_rank=1,
             storage_options=cloud.options, verbose=False)  # fmt: skip
    assert cli(["merge", cloud.url, "--storage-options", opts]) == 0
    assert cli(["history", cloud.url, "--storage-options", opts]) == 0
    assert cli(["verify", cloud.url, "--storage-options", opts]) == 0  # every chunk's size and checksum
    root = cloud.url.rsplit("/", 1)[0]
    capsys.readouterr()
    assert cli(["runs", root, "--storage-options", opts, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["output_dir"] for r in rows] == [cloud.url] and rows[0]["state"] == "complete", rows
    assert sorted(int(x["i"]) for x in StreamingDataset(cloud.url, storage_options=cloud.options)) == list(range(n))
    assert cli(["clean", cloud.url, "--storage-options", opts]) in (0, 1)


# --- secrets and mistakes ------------------------------------------------------------------------------


@pytest.mark.azure
def test_azure_secrets_never_in_errors_records_or_status(azure_server, azure_url, capsys, monkeypatch):
    options = azure_server.storage_options
    result = optimize(
        lambda i: {"i": i} if i != 4 else 1 / 0, list(range(10)), azure_url, chunk_size=3, num_workers=1,
        on_error="skip", storage_options=options, verbose=False,
    )  # fmt: skip
    assert result.published
    storage = open_storage(azure_url, options)
    for key in storage.list(""):
        data = storage.read_bytes(key)
        assert AZURITE_KEY.encode() not in data and b"AccountKey" not in data, key
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azure_server.connection_string)
    capsys.readouterr()
    for command in (["status", azure_url], ["history", azure_url], ["runs", azure_url.rsplit("/", 1)[0]]):
        assert cli(command) == 0
    wrong_key = "d3Jvbmcta2V5LXRoYXQtbXVzdC1uZXZlci1iZS1wcmludGVkLTAxMjM0NTY3ODk="
    wrong = azure_server.connection_string.replace(AZURITE_KEY, wrong_key)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", wrong)
    assert cli(["status", azure_url]) != 0
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "credentials rejected" in text, text
    assert AZURITE_KEY not in text and wrong_key not in text and "AccountKey" not in text, text
    with pytest.raises(StorageError) as info:
        StreamingDataset(azure_url, storage_options={"connection_string": wrong})
    assert wrong_key not in str(info.value) and "credentials rejected" in str(info.value)


@pytest.mark.gcs
def test_gcs_key_file_never_printed_and_no_credentials_names_the_chain(gcs_server, gcs_bucket, tmp_path, monkeypatch):
    """Without the emulator variable, Google's default chain runs: with nothing configured the
    error names the chain; with a key file whose token endpoint fails, the key never shows."""
    import subprocess

    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))  # no ADC file there
    monkeypatch.setenv("HOME", str(tmp_path))
    url = f"gs://{gcs_bucket}/p"
    with pytest.raises(StorageError) as info:
        open_storage(url, {"api_endpoint": gcs_server.endpoint}).check()
    message = str(info.value)
    assert message.startswith(f"no Google Cloud credentials found for {url}: tried GOOGLE_APPLICATION_CREDENTIALS")
    pem = tmp_path / "k.pem"
    subprocess.run(["openssl", "genrsa", "-out", str(pem), "2048"], check=True, capture_output=True)
    private_key = pem.read_text()
    dead = __import__("support.s3server", fromlist=["free_ports"]).free_ports(1)[0]
    key_file = tmp_path / "key.json"
    key_file.write_text(
        json.dumps({
            "type": "service_account", "project_id": "p", "private_key_id": "abc", "private_key": private_key,
            "client_email": "sw@p.iam.gserviceaccount.com", "client_id": "1",
            "token_uri": f"http://127.0.0.1:{dead}/token",
        })
    )  # fmt: skip
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))
    with pytest.raises(StorageError) as info:
        open_storage(url, {"api_endpoint": gcs_server.endpoint, "retry_timeout": 1}).check()
    message = str(info.value)
    body = private_key.splitlines()[1]
    assert body not in message and "PRIVATE KEY" not in message, message


@pytest.mark.azure
def test_azure_mistakes_are_one_line(azure_server, azure_container, tmp_path):
    bad_key = dict(azure_server.storage_options)
    bad_key["connection_string"] = bad_key["connection_string"].replace(AZURITE_KEY, "AAAA" + AZURITE_KEY[4:])
    with pytest.raises(StorageError, match="credentials rejected by .* for container " + azure_container):
        open_storage(f"az://{azure_container}/p", bad_key).check()
    with pytest.raises(StorageError, match="container sw-none-here does not exist at "):
        optimize(plain, [1], "az://sw-none-here/p", chunk_size=1, storage_options=azure_server.storage_options,
                 verbose=False)  # fmt: skip
    port = __import__("support.s3server", fromlist=["free_ports"]).free_ports(1)[0]
    dead = {
        "connection_string": azure_server.connection_string.replace(azure_server.endpoint, f"http://127.0.0.1:{port}")
    }
    # counted, not timed: a service never reached is named at once (1 request), not retried
    # for the default 60 s budget
    with counted_store_requests(tmp_path / "counts") as counts:
        with pytest.raises(StorageError, match="cannot reach the Azure endpoint"):
            open_storage(f"az://{azure_container}/p", dead).check()
        assert counts() == {"unreachable": 1}, counts()


@pytest.mark.gcs
def test_gcs_missing_bucket_and_dead_endpoint(gcs_server, tmp_path):
    with pytest.raises(StorageError, match="bucket sw-none-here does not exist at " + gcs_server.endpoint):
        optimize(plain, [1], "gs://sw-none-here/p", chunk_size=1, verbose=False)
    port = __import__("support.s3server", fromlist=["free_ports"]).free_ports(1)[0]
    # counted, not timed: a service never reached is named at once (1 request), not retried
    # for the default 60 s budget
    with counted_store_requests(tmp_path / "counts") as counts:
        with pytest.raises(StorageError, match="cannot reach the GCS endpoint"):
            open_storage("gs://somebucket/p", {"api_endpoint": f"http://127.0.0.1:{port}"}).check()
        assert counts() == {"unreachable": 1}, counts()


# --- inputs read where they live ----------------------------------------------------------------------


def test_parquet_and_files_inputs_on_the_cloud(cloud, tmp_path):
    """sources.parquet / sources.files over gs:// and az://: listed with sizes and versions
    (list_info), row groups read by ranged reads (read_range) on a read-only input view."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from shardwright import sources

    raw = open_storage(cloud.url, cloud.options)
    for f in range(2):
        path = tmp_path / f"p{f}.parquet"
        pq.write_table(pa.table({"id": list(range(f * 100, f * 100 + 100))}), path, row_group_size=30)
        raw.write_bytes(f"raw/p{f}.parquet", path.read_bytes())
    source = sources.parquet(f"{cloud.url}/raw/", columns=["id"], storage_options=cloud.options)
    assert len(source) == 200 and source[150] == {"id": 150}
    out = f"{cloud.url}/ds"
    optimize(lambda row: {"id": int(row["id"])}, source, out, chunk_size=16, num_workers=2,
             storage_options=cloud.options, verbose=False)  # fmt: skip
    assert [int(x["id"]) for x in StreamingDataset(out, storage_options=cloud.options)] == list(range(200))
    refs = sources.files(f"{cloud.url}/raw", pattern="*.parquet", storage_options=cloud.options)
    assert [r.path for r in refs] == [f"{cloud.url}/raw/p0.parquet", f"{cloud.url}/raw/p1.parquet"]
    assert refs[0].read()[:4] == b"PAR1" and refs[1].version
