"""Shard claims (protocol 5) on the in-memory backend: who may take a claim over, and what a
writer whose claim was taken over can still do (nothing that reaches the dataset). The crash
points of the claim step, as fencing is tested: each row is a state a crash leaves, and what
the next claimant finds."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace

import pytest

from shardwright import LeaseLostError
from shardwright.errors import CorruptStateError
from shardwright.process import host_identity
from shardwright.protocol.claims import ShardClaims
from shardwright.protocol.commit import PendingChunk, RoundSettings, commit_round
from shardwright.protocol.layout import PROTOCOL_VERSION, SHARDS_PREFIX, claim_name, claimed_shard, lease_key
from shardwright.protocol.lease import HOLDER_FIELDS, HolderFields, Lease, task_identity
from shardwright.protocol.manifest import Manifest
from shardwright.protocol.records import load_progress
from shardwright.storage import open_storage
from support.sealed_records import small_manifest

SETTINGS = RoundSettings("run", 1, None, True)


@pytest.fixture
def storage():
    name = f"claims-{uuid.uuid4().hex}"
    from shardwright.storage.memory import MemoryStorage

    yield open_storage(f"memory://{name}")
    MemoryStorage.drop(name)


def chunk(claims: ShardClaims, shard: int, seq: int, prev: int | None, done: bool = False) -> PendingChunk:
    ticket = claims.ticket(shard)
    return PendingChunk(
        shard,
        seq,
        [b"item"],
        seq,
        seq + 1,
        0,
        done,
        prev_epoch=prev,
        epoch=ticket.epoch,
        claim=(ticket.key, ticket.owner),
    )


def as_other_host(monkeypatch, name: str) -> None:
    monkeypatch.setenv("SHARDWRIGHT_HOST_ID", name)


def test_claim_names_round_trip():
    assert claim_name(7) == "shard-00007"
    assert claimed_shard(claim_name(7)) == 7
    assert claimed_shard("node-0") is None and claimed_shard("shard-x") is None


def test_live_claim_of_another_host_is_left_alone(storage, monkeypatch):
    as_other_host(monkeypatch, "host-a")
    a = ShardClaims(storage, HolderFields(node_rank=0))
    assert a.claim(0) is None
    as_other_host(monkeypatch, "host-b")
    b = ShardClaims(storage)
    holder = b.claim(0)
    assert holder is not None and holder.host == "host-a" and holder.shard == 0
    a.release_all()
    assert b.claim(0) is None, "a released claim is free"
    b.release_all()


def test_claim_fields_are_typed_and_read_back(storage, monkeypatch):
    """A Ray task's claim: its task index is ``ray_task``, read back, and the scheduler task the
    lease writes itself (``task``) is not overwritten: the holder's fields are typed
    (HolderFields), so no field a writer passes can stand in for one the lease writes."""
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    as_other_host(monkeypatch, "host-a")
    a = ShardClaims(storage, HolderFields(ray_node="aaaa", ray_task=5, host_name="box"))
    assert a.claim(0) is None
    written = task_identity()
    monkeypatch.delenv("SLURM_JOB_ID")  # another task looks: the same one would take it over
    as_other_host(monkeypatch, "host-b")
    holder = ShardClaims(storage).claim(0)
    assert holder is not None
    assert (holder.ray_task, holder.host_name, holder.task) == (5, "box", written)
    assert written is not None and written.startswith("slurm:")
    a.release_all()
    assert "task" not in HOLDER_FIELDS and set(HolderFields().to_json()) == set()


def test_judged_dead_holder_is_taken_over_at_once_and_fenced(storage, monkeypatch):
    """A Ray node reported dead: its task's claim goes at once, well inside the TTL; the task,
    still running cut off, writes no record after that and its late chunk is an orphan."""
    as_other_host(monkeypatch, "node-a")
    a = ShardClaims(storage, HolderFields(ray_node="aaaa"))
    assert a.claim(0) is None
    commit_round(storage, [chunk(a, 0, 0, None)], SETTINGS)
    a_epoch = a.ticket(0).epoch

    as_other_host(monkeypatch, "node-b")
    dead = {"aaaa"}
    b = ShardClaims(storage, HolderFields(ray_node="bbbb"), judge=lambda h: "dead node" if h.ray_node in dead else None)
    assert b.claim(0) is None, "a holder on a dead node must be taken over without waiting for its TTL"
    assert b.ticket(0).epoch > a_epoch

    with pytest.raises(LeaseLostError):  # A wakes up: its record is refused, its chunk stays an orphan
        commit_round(storage, [chunk(a, 0, 1, a_epoch)], SETTINGS)
    progress = load_progress(storage, {0: (0, 3)}, "run", repair=True)[0]
    assert [(r.seq, r.epoch) for r in progress.records] == [(0, a_epoch)]
    commit_round(storage, [chunk(b, 0, 1, a_epoch), chunk(b, 0, 2, -1, done=True)], SETTINGS)
    progress = load_progress(storage, {0: (0, 3)}, "run", repair=True)[0]
    assert progress.done
    assert [r.epoch for r in progress.records] == [a_epoch, b.ticket(0).epoch, b.ticket(0).epoch]
    # A's late chunk 1 held B's items: named by its content it has B's name and B's bytes
    # (protocol 6), so every chunk file is one a record names, and reads back as recorded
    named = sorted(r.chunk.filename for r in progress.records if r.chunk is not None)
    assert sorted(storage.list("chunk-")) == named
    assert all(storage.size(r.chunk.filename) == r.stored_bytes for r in progress.records if r.chunk is not None)
    b.release_all()
    a.release_all()
    assert storage.list(lease_key("shard-")) == [], "B released its claim; A's release must not delete B's"


def test_late_record_written_before_the_check_loses_the_chain(storage, monkeypatch):
    """A passed its claim check just before B took over, and its record lands after B's: the
    chain takes B's (higher epoch) and drops A's later ones."""
    as_other_host(monkeypatch, "node-a")
    a = ShardClaims(storage)
    a.claim(0)
    commit_round(storage, [chunk(a, 0, 0, None)], SETTINGS)
    a_epoch = a.ticket(0).epoch
    as_other_host(monkeypatch, "node-b")
    b = ShardClaims(storage, judge=lambda h: "dead")
    b.claim(0)
    commit_round(storage, [chunk(b, 0, 1, a_epoch)], SETTINGS)
    late = RoundSettings("run", 1, None, True)  # A's round, its claim check already passed
    commit_round(storage, [PendingChunk(0, 1, [b"late"], 1, 2, 0, False, prev_epoch=a_epoch, epoch=a_epoch)], late)
    commit_round(storage, [PendingChunk(0, 2, [b"late"], 2, 3, 0, True, prev_epoch=a_epoch, epoch=a_epoch)], late)
    progress = load_progress(storage, {0: (0, 3)}, "run", repair=True)[0]
    assert [(r.seq, r.epoch) for r in progress.records] == [(0, a_epoch), (1, b.ticket(0).epoch)]
    assert not progress.done
    names = sorted(k.rsplit("/", 1)[1] for k in storage.list(SHARDS_PREFIX))
    assert names == [f"00000-000000-{a_epoch}.json", f"00000-000001-{b.ticket(0).epoch}.json"]
    a.release_all()
    b.release_all()


@pytest.mark.parametrize("crash", ["after_claim", "after_chunk", "after_record"])
def test_crash_points_of_a_claimed_shard(storage, crash):
    """A claimant is killed (its pid is gone, same host) at each point; the next claimant takes
    the claim at once and resumes exactly after the last committed record."""
    a = Lease(storage, claim_name(0), "shard 0", HolderFields(shard=0))  # no heartbeat: it dies with its process
    assert a.try_acquire() is None
    claim = (a.key, a.owner)
    if crash != "after_claim":
        commit_round(
            storage, [PendingChunk(0, 0, [b"x"], 0, 1, 0, False, prev_epoch=None, epoch=a.epoch, claim=claim)], SETTINGS
        )
    if crash == "after_record":
        commit_round(storage, [PendingChunk(0, 1, [b"x"], 1, 2, 0, False, epoch=a.epoch, claim=claim)], SETTINGS)
    elif crash == "after_chunk":
        storage.write_bytes(f"chunk-1-00000-000001-{a.epoch}.bin", b"orphan", durable=False)
    storage.barrier()
    holder = json.loads(storage.read_bytes(a.key))
    storage.write_bytes(a.key, json.dumps({**holder, "pid": 2**22 + 12345}).encode())  # a pid that is gone
    b = ShardClaims(storage)
    assert b.claim(0) is None, "a claim of a dead process on this host is taken over at once"
    assert b.ticket(0).epoch > a.epoch
    progress = load_progress(storage, {0: (0, 3)}, "run", repair=True)[0]
    expected = {"after_claim": 0, "after_chunk": 1, "after_record": 2}[crash]
    assert progress.next_seq == expected and progress.next_input == expected
    b.release_all()


def test_same_kubernetes_index_takes_its_own_claim_over(storage, monkeypatch):
    """A pod restarted with the same completion index is the same task: its previous
    incarnation's claim (pid numbers repeat across pods) is taken over at once."""
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "2")
    monkeypatch.setenv("SHARDWRIGHT_JOB_NAME", "prep")
    monkeypatch.delenv("SHARDWRIGHT_HOST_ID", raising=False)
    for var in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID"):
        monkeypatch.delenv(var, raising=False)
    assert host_identity() == "k8s:prep/2" and task_identity() == "k8s:prep/2"
    old = Lease(storage, claim_name(3), "shard 3")
    assert old.try_acquire() is None
    storage.write_bytes(old.key, json.dumps({**json.loads(storage.read_bytes(old.key)), "pid": 1}).encode())
    new = ShardClaims(storage)
    assert new.claim(3) is None
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "1")  # another index is another task: left alone
    other = ShardClaims(storage)
    assert other.claim(3) is not None
    new.release_all()


def test_a_requeued_slurm_task_takes_its_earlier_incarnations_claim_but_never_back(storage, monkeypatch):
    """A requeued Slurm task has the same identity as the incarnation before it, which may still
    run (its node cut off): only the later restart count takes a claim over (the earlier one
    taking the later one's claims back failed the requeued attempt under load)."""
    monkeypatch.delenv("SHARDWRIGHT_HOST_ID", raising=False)
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    first = Lease(storage, claim_name(3), "shard 3")
    assert first.try_acquire() is None
    storage.write_bytes(first.key, json.dumps({**json.loads(storage.read_bytes(first.key)), "pid": 1}).encode())
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    requeued = ShardClaims(storage)
    assert requeued.claim(3) is None  # the later incarnation takes it over at once
    body = json.loads(storage.read_bytes(first.key))
    storage.write_bytes(first.key, json.dumps({**body, "pid": 1}).encode())  # as seen from another process
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    earlier = ShardClaims(storage)
    assert earlier.claim(3) is not None  # the earlier one, still running, leaves it alone
    legacy = {k: v for k, v in json.loads(storage.read_bytes(first.key)).items() if k != "slurm_restart"}
    storage.write_bytes(first.key, json.dumps(legacy).encode())
    assert ShardClaims(storage).claim(3) is None  # a claim written before the count was recorded: as before


def test_host_identity_precedence(monkeypatch):
    env = {"SHARDWRIGHT_HOST_ID": "emulated-1", "JOB_COMPLETION_INDEX": "0", "SHARDWRIGHT_JOB_NAME": "j"}
    assert host_identity(env) == "emulated-1"
    assert host_identity({"JOB_COMPLETION_INDEX": "4", "SHARDWRIGHT_JOB_NAME": "j"}) == "k8s:j/4"
    import socket

    assert host_identity({"JOB_COMPLETION_INDEX": "4"}) == socket.gethostname()  # no job name: the hostname


def _manifest(protocol: int) -> dict:
    """A small run's manifest as ``protocol`` wrote it (a plain run id: no seal mark)."""
    return {**replace(small_manifest(), run_id="r").to_json(), "protocol": protocol}


def test_a_protocol_4_run_still_resumes_and_older_ones_are_refused():
    assert PROTOCOL_VERSION == 7
    assert Manifest.from_json(_manifest(4), "m").protocol == 4
    assert Manifest.from_json(_manifest(5), "m").protocol == 5, "chunks named by epoch keep their names"
    assert Manifest.from_json(_manifest(6), "m").protocol == 6
    with pytest.raises(CorruptStateError, match="protocol 3"):
        Manifest.from_json(_manifest(3), "m")


def test_a_reader_that_does_not_hold_the_shard_tolerates_a_listing_gap(storage):
    """A directory listing taken while a writer creates files can miss one and see a later
    one (ext4 lists in hash order): status and peers see the shard less advanced, while the
    shard's claimant (repair=True) still refuses a real gap as corruption."""
    a = ShardClaims(storage)
    a.claim(0)
    commit_round(storage, [chunk(a, 0, 0, None)], SETTINGS)
    commit_round(storage, [chunk(a, 0, 1, -1)], SETTINGS)
    commit_round(storage, [chunk(a, 0, 2, -1)], SETTINGS)
    middle = [k for k in storage.list(SHARDS_PREFIX) if "-000001-" in k][0]
    records = storage.read_bytes(middle)
    storage.delete(middle)  # what the listing missed
    seen = load_progress(storage, {0: (0, 5)}, "run")[0]
    assert seen.next_seq == 1
    with pytest.raises(CorruptStateError, match="one chain"):
        load_progress(storage, {0: (0, 5)}, "run", repair=True)
    storage.write_bytes(middle, records)
    assert load_progress(storage, {0: (0, 5)}, "run", repair=True)[0].next_seq == 3
    a.release_all()


def test_a_claim_taken_under_a_superseded_node_lease_is_stale(storage, monkeypatch):
    """Run A was paused past its TTL; B took node 0's lease over. A, woken up, may still claim
    a shard before its heartbeat notices: B takes that claim over at once (the node lease says
    who runs the share), and A's writes are fenced by the claim's epoch."""
    from shardwright.engine.local import superseded_node

    as_other_host(monkeypatch, "same-host-a")
    a = ShardClaims(storage, HolderFields(node_rank=0, node_lease="owner-a"))
    assert a.claim(5) is None
    as_other_host(monkeypatch, "same-host-b")
    stranger = ShardClaims(storage)
    assert stranger.claim(5) is not None, "without the node lease, a live claim is left alone"
    b = ShardClaims(
        storage, HolderFields(node_rank=0, node_lease="owner-b"), judge=lambda h: superseded_node(h, 0, "owner-b")
    )
    assert b.claim(5) is None
    with pytest.raises(LeaseLostError):
        commit_round(storage, [chunk(a, 5, 0, None)], SETTINGS)
    other_rank = ShardClaims(storage, judge=lambda h: superseded_node(h, 1, "owner-c"))
    assert other_rank.claim(5) is not None, "another rank's node lease says nothing about this claim"
    b.release_all()
    a.release_all()


def test_release_all_in_an_outage_asks_the_store_once_not_once_per_claim(storage):
    """A node holding many claims, its run failing because the store stopped answering: the
    first release that gets no answer ends the asking (the rest expire on their own), so giving
    up costs one short retry budget, not one per claim (issue 19's CI: 50 s with 4 claims)."""
    from shardwright.errors import StorageError

    claims = ShardClaims(storage)
    for shard in range(5):
        assert claims.claim(shard) is None
    asked: list[tuple[str, str | None]] = []

    def outage(op: str, key: str | None):
        asked.append((op, key))
        return StorageError("S3 GET kept failing for 5 s: rerun the same call to resume")

    storage.fail_when(outage)
    claims.release_all()
    assert len(asked) == 1, asked  # one read of the first claim, then nothing
    assert claims.held == {}
    storage.clear_faults()
    # the claims are left to expire; in a store that answers, every release deletes its claim
    claims = ShardClaims(storage)
    for shard in range(5, 8):
        assert claims.claim(shard) is None
    claims.release_all()
    assert not [k for k in storage.list() if any(claim_name(s) in k for s in range(5, 8))]


def test_holder_fields_are_typed_and_read_back_without_overwriting_the_scheduler_task(storage):
    """A Ray claim's task index has its own field: it never overwrites the scheduler task
    the lease names (which decides whether a restarted task may take the lease over)."""
    fields = HolderFields(node_rank=1, num_nodes=2, executor="ray", ray_node="n", ray_task=3, host_name="h")
    lease = Lease(storage, claim_name(7), "shard 7", fields)
    assert lease.try_acquire() is None
    lease.show_current_inputs([4, -1])
    assert lease.renew()
    holder = Lease(storage, claim_name(7), "shard 7").try_acquire()
    assert holder is not None
    assert (holder.node_rank, holder.num_nodes, holder.executor, holder.ray_task, holder.host_name) == (
        1,
        2,
        "ray",
        3,
        "h",
    )
    assert holder.task == task_identity() and holder.current_inputs == (4, -1)
    lease.release()


def test_a_claim_lost_to_a_power_cut_is_free_and_fenced_by_a_later_epoch(storage):
    """Claims are taken and released without a flush (protocol.claims): a power cut may undo
    either. Undone, the claim is free again (its holder died with the cut) and the next
    claimant's epoch is still above it; a release undone leaves a claim its next claimant
    takes over; the records committed under the first claim survive and are resumed."""
    from shardwright.storage.memory import MemoryStorage

    memory = storage
    assert isinstance(memory, MemoryStorage)
    node = open_storage(storage.url)  # the node's own handle: the workers' barriers are not its
    a = ShardClaims(node)
    assert a.claim(0) is None
    first = a.ticket(0)
    commit_round(storage, [chunk(a, 0, 0, None)], SETTINGS)
    storage.barrier()
    assert memory.crash() == [first.key]  # the claim was never flushed: the cut undoes it
    assert not storage.exists(first.key)
    while int(time.time() * 1000) <= first.epoch:  # a power cut and a restart take longer than 1 ms
        time.sleep(0.001)
    b = ShardClaims(node)
    assert b.claim(0) is None
    assert b.ticket(0).epoch > first.epoch
    assert load_progress(storage, {0: (0, 3)}, "run", repair=True)[0].next_seq == 1
    node.barrier()  # the claim made durable (as any later barrier of the node does) ...
    b.release(0)
    assert not storage.exists(first.key)
    memory.crash()  # ... and its release undone by a cut: the dead holder's claim is back
    holder = json.loads(storage.read_bytes(first.key))
    storage.write_bytes(first.key, json.dumps({**holder, "pid": 2**22 + 12345}).encode())  # its pid is gone
    c = ShardClaims(storage)
    assert c.claim(0) is None, "the claim of a dead holder is taken over"
    a.release_all()
    c.release_all()
