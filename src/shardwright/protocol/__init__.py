"""The commit protocol: what a run writes, in which order, and why a crash anywhere loses
nothing and repeats nothing. This docstring is THE specification; docs/design.md explains
the rest of the system and points here.

Modules: ``layout`` (every name), ``index`` (index.json, read), ``shards`` (input ranges), ``fingerprint`` (input
identity; ``int_blocks``: its numpy path for ints, the same bytes), ``identity`` (per-input identities),
``recorded`` (the runs' records of them), ``incremental`` (the incremental plan), ``manifest``, ``records``, ``claim``
(sample format), ``lease``, ``claims`` (shard claims), ``failures``,
``commit`` (steps 1-2), ``progress`` (work past a record, between chunks), ``publish`` (steps 3-5 and the one cleanup), ``observe`` + ``decide``
(what a call does with what it finds), ``status`` (a typed report of a run), ``crash``
(fault injection for tests).

Terms
=====
An *output* is a local directory or an S3, GCS or Azure Blob prefix, reached only through
:class:`shardwright.storage.Storage`. A *run* is one manifest's life: fresh, append, retry
or overwrite. Its inputs are cut into ``num_shards`` contiguous *shards*; a shard is worked
on by one worker at a time, in input order, and its chunks hold only its own inputs. The
dataset is the shards' chunks in shard order. A run's chunk files carry its *generation*
and their own content's checksum (``chunk-{gen}-{shard}-{seq}-{xxh3_128 hex}.bin``, protocol
6), so two writers of one name always write the same bytes, and two runs of the same call
write the same files (protocols 4-5 put the writer's lease epoch there instead).

Steps and the state on disk after each
======================================
0. **Claim.** The caller takes its node lease ``.shardwright/leases/node-{rank}.json``
   (conditional create, or compare-and-swap over a stale one; renewed every TTL/4): two live
   processes never run the same node's share, and a run in progress is visible. Then, for
   each shard it is about to work on (protocol 5), the shard's *claim*
   ``.shardwright/leases/shard-{shard:05d}.json``, taken the same way, BEFORE the shard's
   records are read (the single node of a run it has just created reads none: nobody else
   can have written any, for another process joins such a run only by taking its node lease
   over, which the committer's check before each record write catches). Each acquisition
   gets an *epoch*: ``max(now in ms, the stale holder's epoch + 1)``, stored in the lease; a
   shard's chunk and record names carry its claim's epoch, and its committer checks the
   claim before each record write (see Fencing). A claim is released once the shard's
   ``done`` record is committed; a done shard is never claimed for writing again (the
   claimant reads ``done`` and releases it).
   *After:* a lease and claims; nothing else changed.
1. **Manifest.** ``decide(observe(output), request)`` picks the plan (see ``decide``). A new
   run creates ``.shardwright/manifest.json`` with a conditional create: several nodes may
   start together, and all of them use the winner's (after checking it is the same call).
   The node that created it then writes the *unit table* of the call's inputs,
   ``.shardwright/inputs/{gen}.units`` (see Incremental runs); a node that resumes and
   misses it writes the same bytes.
   *After:* a manifest, no records: a rerun resumes every shard from its start.
2. **Chunk** (per chunk, in a worker's commit round): the chunk file is written
   (``durable=False``); when the round's files are written, one ``storage.barrier()``
   makes them (and the previous round's records, if no earlier barrier did) durable.
   Rounds are pipelined: a worker writes round k+1's chunk files while round k is in its
   barrier and step 3 (its records are still written in round order, each after its own
   barrier); a barrier that flushes some of round k+1's files too only makes them durable
   early, since no record names them.
   *After:* a chunk file no record names (an orphan): invisible; a rerun that cuts the same
   chunk writes the same name and keeps the orphan if it holds exactly those bytes (else
   replaces it); publishing deletes orphans of its generation.
3. **Record** (the commit point): the writer first checks that the shard's claim still
   names it (a fenced writer stops here); then one file per shard per round,
   ``.shardwright/shards/{shard}-{first seq}-{epoch}.json``, holds the round's consecutive
   records of that shard. Each record names its chunk (filename, items, stored bytes),
   carries the run id, its ``epoch`` and ``prev_epoch`` (the epoch of the shard's record
   seq-1, None for seq 0), and says where the shard resumes: ``next_input`` and ``skip_outputs`` (outputs of
   ``next_input`` already committed: a chunk may end inside a generator's outputs). The
   shard's last record has ``done: true``; ``failed`` lists inputs skipped with
   ``on_error="skip"``. The file ends with the xxh3-128 checksum of its records
   (``records.seal_records``); a run started by protocol 7 or later, known by its manifest's
   protocol or by its run id's seal mark ``s7-`` (``layout.SEALED_RUN_ID_PREFIX``, so a manifest
   edited back to 6 does not unseal it), refuses a record file without one as edited by hand;
   protocol-6 runs' unsealed files are still read. *Record logs* (module ``record_log``, issue 36):
   where storage appends in place (local disk), a worker appends each round's record file,
   the same bytes as one line, to its own ``shards/log-{token}-{n}.jsonl`` instead of writing
   the file (one append per round and one file per worker, instead of a create, rename and
   fsync per round and an unlink of each at cleanup); a line is read exactly as the file it
   stands for, a torn line ends its log (nothing after it was durable), and a damaged one is
   refused like a damaged file. Object stores keep one file per round. The record file becomes durable at the writer's next barrier (a
   worker's committer runs one as soon as no round waits for it). A worker's last round
   gets none: publishing needs only durable chunks, and a power cut before the dataset is
   published loses at most that round's records, which means redoing it.
   *After:* the chunk is committed; a rerun starts right after it.
3b. **Progress between chunks** (module ``progress``, issue 32; only with ``use_checkpoint``):
   a chunk of slow inputs (LLM calls) may take minutes to fill, so a shard's writer also
   saves what it holds past its last record, every ``durable_every`` seconds (default 2) and
   after each chunk: ``.shardwright/progress/{shard:05d}-{epoch}.bin``, replaced whole. It
   names the record it extends (the chain's length, tip epoch and position) and holds the
   writer's encoded outputs not yet in a chunk, and each input past them that is in flight or
   finished out of order (``concurrency``): its outputs, its last ``ResumePoint`` state and
   how many outputs came before it. The committer writes it after the records of every chunk
   submitted before it (the same queue), so it never claims less than the chain it extends.
   The buffer's outputs are saved append-only (module ``segments``, issue 35): the ones added
   since the previous snapshot, once past 1 MiB, become a new *segment*
   ``progress/{shard:05d}-{epoch}-{xxh3_128 hex}.seg``, named by its content and written
   durably BEFORE the snapshot that lists it (checksum, items, bytes); the rest stay inline.
   So a snapshot of a large buffer rewrites at most 1 MiB and the chunk is cut by
   ``chunk_size``/``chunk_bytes`` alone, never where a snapshot happened to find it large.
   A resume uses the snapshot that extends exactly its chain's tip (same run id, length, tip
   epoch, position; the highest epoch if several do, the next if its segments are not whole:
   each is read with its size bounded first and its checksum verified; one missing or damaged
   means that snapshot is ignored, never read as wrong data): the buffer goes back into the writer,
   finished inputs to the reorder buffer, and an input stopped at a ResumePoint is called as
   ``fn(input, resume=state)``, its outputs before that point kept. Any other snapshot (older,
   torn, another run's) is ignored. *A snapshot is not a commit*: nothing in it is in the
   dataset until a record names a chunk holding it, so exactly-once rests on the records alone
   and a lost snapshot only means redoing that work. On Ctrl-C or SIGTERM (or fn failing for
   good) a worker starts no new input; inputs in flight run on to their next ResumePoint (or
   their end) for up to ``stop_grace`` seconds; then the full chunks are committed (steps 2-3)
   and the chunk in progress is NOT: its items, with every other input past it, go into the
   snapshot as the shard's *pending tail*, written by the committer after the records of the
   chunks submitted before it (like a SQLite page written to the journal, not to the database
   file). The resume reopens that chunk with the tail's items and fills it on, so each of the
   shard's chunks is cut where a run never stopped cuts it: the same chunk bytes, names and
   digest (issue 35), and no input whose outputs are in the tail is given to fn again (a
   generator stopped between two outputs is called again on that input, skipping the outputs
   kept). A tail is a snapshot like any other, so exactly-once still rests on the records
   alone: a SIGKILL before it is written leaves the records (its inputs are redone, cut the
   same way), after it the resume takes it up; a fenced writer's tail names its own epoch and
   an older tip, and is ignored once the new holder commits or writes its own (its segments
   too: names carry the epoch, and only its own snapshots list them); a writer deletes its
   segments once its next snapshot no longer lists them, and cleanup (6) deletes tails and
   segments with the other snapshots. Snapshots end with an xxh3-128 checksum of their bytes
   (format ``SWPROG3``); one that does not match, or of an earlier format (``SWPROG1``/``SWPROG2``,
   no checksum or no segments), is ignored like a torn one and its work redone from the
   records; an older version refuses the new format's magic the same way. Without ``use_checkpoint`` (no records to extend),
   or for a chunk in progress too large for a snapshot (about 1 GiB), the stop commits it
   partly filled as before. A SIGKILL repeats the calls in flight and those finished within
   the last ``durable_every`` seconds (a worker without ``concurrency`` writes a snapshot only
   when it stops: a SIGKILL repeats its inputs past the last record).
   *After:* the snapshot; nothing in the dataset changed.
4. **Publish** (whoever holds the ``publish`` lease once every shard is done, after renewing
   its node lease): each shard's chain is what storage holds: its records are read again
   from storage, except a shard whose record files ONE listing of ``shards/`` proves to be
   exactly the ones this process's workers wrote (*What publish takes without reading back*,
   below); every chunk they name must exist with the recorded size; the run's *selection*
   ``.shardwright/inputs/{gen}.json`` is written (which inputs it put into the dataset: the
   ones it ran minus those that failed and were skipped); then index.json = the base
   chunks (append/retry/incremental: the dataset as the run found it, copied into the
   manifest) + every shard's chunks in shard order. THE PUBLICATION POINT: index.json
   exists only for a complete dataset.
   *After:* the dataset is readable; the manifest and records are still there.
   *What publish takes without reading back* (``records.trusted_progress``, issue 36: reading
   a run's record files back was 1-2 % of a 2M-item run on local disk, and one GET per file
   on an object store). Step by step, like SQLite's page on atomic commit:

   a. A worker reports each record it committed to its main process only after the record's
      file is written (step 3), together with that file's key (``Committed.file_key``: the
      record log's, where it appended it). The
      main process keeps, per shard, the set of those keys (``ShardProgress.written``); a
      record it learnt any other way (read from storage when it claimed a shard to resume it)
      makes the set unknown for that shard for the rest of the call.
   b. At publish, with every worker of this call stopped, it lists ``shards/`` once. A shard
      whose reported records end with ``done`` and whose record keys in that listing are
      exactly its set is taken as reported; every other shard's files are read and its chain
      followed as before (the *fallback*). A record log may hold any shard of its writer, so
      when the logs listed are not exactly the ones our workers reported, no shard is taken
      and all are read. A log is named by its writer's random token, created with O_EXCL and
      appended to by that writer alone: a log of ours holds only what our worker appended.
   c. Why the two give the same chain. A record file's name carries its shard, its first seq
      and its writer's epoch. An epoch belongs to one claim acquisition (step 0: above the
      holder it took over from, by compare-and-swap, and above any earlier holder by the clock
      assumption), and only the process holding that claim writes names with it, each seq of
      its shard once. So a file with our worker's name holds the records our worker wrote
      there, which it reported. Every file any other writer leaves -- a process that took the
      claim over, a fenced writer woken by SIGCONT after it, a leftover of another run --
      carries another epoch, so another name, and is in the listing: the fallback reads it
      and its chain wins as it always did. A file of ours that is gone (a new holder's repair,
      a hand) leaves a key of the set unlisted: the fallback again. When the listing equals the
      set, storage holds exactly our worker's files; their records form one chain 0..n-1
      ending in ``done`` (seq 0 with ``prev_epoch`` None, each next one naming its
      predecessor's epoch) with no other candidate at any seq, which is what the read path
      would build, dropping nothing.
   d. What is not looked at again: the bytes of our own record files between their write and
      publishing. A file of ours damaged on disk or edited by hand in that window (same name)
      would have been refused by its checksum, or its edit published; now what the worker
      wrote is published. The chunks are checked as before (every one named exists with the
      recorded size). A writer that writes after the listing races publishing exactly as it
      raced the reads before it.
5. **Run record**: ``.shardwright/run.json`` (counts, timings, failed inputs, run id). The
   failed inputs come from the records, or, when a power cut after step 4 took a worker's
   last records, from the selection (``publish.published_failures``).
6. **Cleanup** (:func:`shardwright.protocol.publish.discard_run_state`, the only cleanup):
   orphan chunks of the generation, shard claims left by killed processes, the records, the
   progress snapshots and their segments, the format claim, and the manifest LAST.
   *After:* only index.json, chunks, run.json, the input identities (``inputs/``),
   failure details and the run history (``history/``, informational: see the history
   module) remain.

Who may take a claim over
=========================
A lease or claim is *stale*, and is taken over by compare-and-swap with a higher epoch, when:
its heartbeat is older than its TTL (any holder, by the clock assumption); its holder has
this process's host identity (``shardwright.process.host_identity``) and its pid is gone (a
SIGKILLed run is resumed at once); it was held by this same scheduler task before a restart
(a requeued Slurm array task, whose ``SLURM_RESTART_COUNT`` is higher than the holder's, never
the other way round; a pod restarted with the same Indexed Job index); or the
caller's judge says its holder is gone (a Ray task: the holder's Ray node is dead, or the
Ray job that started it ended). The last three may be wrong about a holder that still runs
cut off (a partitioned Ray node): that is what fencing is for, so a takeover never waits a
TTL when the scheduler already knows. Shards move between processes only through claims:
the static map (``shard % num_nodes == rank``) says which shards a node *asks* for, an
executor's driver may hand any shard to any task, and a claim held live by another process
is never written to (the local engine refuses with ConcurrentRunError; a Ray task leaves
the shard to its holder and the driver tries it again).

Crash points
============
===================  =====================================  ==========================================
crash                state                                  the rerun
===================  =====================================  ==========================================
before 1             a lease (and claims) at most           takes them over (see above), fresh
during 2             a temp file                            never read, redone; removed at cleanup
between 2 and 3      an orphan chunk                        recomputed; same bytes kept, else replaced
during 3             a temp record file, or a log line      the record does not exist; as above (a
                     cut before its newline                 torn line ends its log)
after 3              the record                             resumes after it: nothing repeated
power cut in 3       a torn (NUL) or lost last record     dropped with the shard's later records
after 3, before 3b   a record; the older snapshot is stale  resumes after the record, redoes the rest
3b, before segment   the previous snapshot and segments     takes it up; the items since redone
is written           (``before_segment``)
3b, after segment    a segment no snapshot lists yet        never read, deleted at cleanup; the
is written           (``after_segment``)                    previous snapshot stands
a listed segment     a snapshot naming it                   that snapshot ignored (size, checksum
lost or damaged                                             checked): an older whole one, or records
during 3b            a temp snapshot file                   never read; the previous snapshot stands
after 3b             the record and its snapshot            takes it up: repeats only the calls in
                                                            flight or done since it was written
a stop, before its   the full chunks' records; no tail      redoes the tail's inputs, same cut
tail is written      (``before_snapshot``)
a stop, after it     the records and the pending tail       reopens the chunk in progress with it
                     (``after_snapshot``)
between 4 and 6      index.json names this generation       ``decide`` -> FINISH_PUBLISH: steps 5-6
during 6             some state gone, manifest still there  step 6 again (each step is idempotent)
===================  =====================================  ==========================================

Exactly once: a sample is in the dataset iff its chunk is named by a committed record on
its shard's chain; a resume starts right after the chain's last record, so no committed
sample is produced again and every uncommitted one is produced again. The *chain* of a
shard: record 0 has ``prev_epoch`` None; record k is, among the records numbered k whose
``prev_epoch`` is the epoch of the chain's record k-1, the one of the highest epoch; it ends
at the ``done`` record or where no record follows. Off the chain are torn records and the
shard's records after them (a power cut), and records of a lower epoch than the chain's
(a fenced writer): dropped, and deleted by the next holder (a record file; a record log's
lines stay in their log, off the chain by the same rule, until cleanup). Anything else off the chain
(a gap, a record after the shard's last, garbage) is a CorruptStateError naming the file,
never skipped. A record of another run id is a leftover of a cleanup cut short and is
dropped like a torn one.

Incremental runs (``mode="incremental"``)
==========================================
Every run records its inputs (modules ``identity`` and ``recorded``): the unit table at step 1, the selection
at step 4, both under its generation. The dataset's *recorded inputs* are the pairs of the
generations up to run.json's (the last finished run); a higher generation is an unfinished
or abandoned run's, ignored and rewritten by the next run of that generation (new runs get
a generation above run.json's, so no two finished runs share one). An incremental call
reads them (``observe(read_identities=True)``) and ``decide`` computes, purely, which of
its inputs are not in the dataset, counting repeats by occurrence and retrying inputs that
failed; the plan is a new run (``manifest.mode == "incremental"``) whose
``input_ranges`` name those positions of the call's inputs, appended to the dataset like an
append run (base chunks in the manifest). Everything else is the ordinary protocol, so it
resumes after a crash at any point like any run:

=================================  =========================================================
crash                              the rerun (the same incremental call)
=================================  =========================================================
before the manifest                decides again from the same published state: same plan
after the manifest, before units   RESUME (same fingerprint); writes the missing unit table
during the chunks and records      RESUME after the last committed record
after the selection, before index  RESUME, publishes again (the selection rewritten, same)
after index.json                   FINISH_PUBLISH, then decides again: nothing new, NOOP
=================================  =========================================================

Nothing new is a NOOP that says so. An input recorded under another version (a file
rewritten since it was added) is refused naming it (RunMismatchError); recorded inputs no
longer given are reported and stay in the dataset. A dataset without recorded inputs (an
older shardwright's, or litdata's) is refused, unless one run made it and its inputs'
fingerprint equals that of the first inputs of this call: then that run is recorded with
this call's identities (its generation's unit table and selection, minus its failed inputs,
written before the new run's manifest: true of the dataset whatever becomes of the new run),
and the tail is appended.

Fencing (a paused writer wakes up)
==================================
A holder A of a shard's claim can be paused (SIGSTOP, a VM pause, a long GC) past the TTL,
or cut off on a node its scheduler reports dead; B takes the claim over with a higher
epoch, resumes from the chain it reads, and A may then run on for up to one heartbeat
before it notices (``lease.lost``) and stops. Everything below is per shard, with "lease"
meaning the shard's claim (protocol 4 fenced by the node lease the same way). What A writes
in that window cannot change what B publishes:

- *No shared names with other bytes.* A's record files carry A's epoch, B's carry B's.
  Chunk files are named by their content's checksum: if A's late chunk ``k`` holds other
  items than B's (cut elsewhere, another fn output), it has another name; if it holds the
  same, it has B's name and B's bytes (the corruption of protocol 3 -- both wrote
  ``chunk-g-s-k.bin``, cut at different places -- cannot happen). On an object store A's
  PUT then replaces B's object with identical bytes, atomically and durably. On local disk
  a replace would not be harmless: B's file may be durable and named by B's durable record
  while A's fresh copy is not flushed yet, so a power cut would tear the recorded chunk.
  So a content-named file is placed with link(2), which never replaces: an existing
  complete copy is kept (A's temp file is dropped; A's barrier fsyncs the kept file), and
  only a copy that does not hold exactly those bytes -- a torn leftover of a power cut,
  whose barrier never completed, so no durable record names it -- is replaced, under the
  key's side lock and checked again there, so two writers that both found it torn cannot
  both replace it (``storage.keep_same``; file systems without hard links do every
  check-then-replace under that lock).
- *A's late records lose.* Let B resume shard s after record m (the chain's tip when B
  read it, epoch e). B's record m+1 has ``prev_epoch`` e and epoch b > e. A late record of
  A numbered m+1 has epoch a < b (the epoch order: b > a because B took A's lease over by
  compare-and-swap and chose above it; a lease released or expired earlier belonged to a
  holder that has stopped, or whose epoch is below by the clock assumption), so the chain
  takes B's; A's record m+2 has ``prev_epoch`` a, which is not the epoch of the chain's
  record m+1: off the chain. A's records written after B read the chain but before B
  wrote over them (B slower, or B died too) are ordinary commits: their chunks are
  durable, uniquely named, and chain correctly.
- *One round at most.* A's committer re-reads the lease before each record write, so A
  writes at most the records of the round during which it was paused; its main process
  renews the lease synchronously right before publishing and stops if it cannot.
- *Publishing trusts storage, not memory.* The publisher re-reads every shard's chain (or,
  for a shard whose record files one listing shows to be exactly its own workers', takes the
  records they reported: step 4 says why that is the chain storage holds; B's or A's late
  files carry another epoch, so another name, and send the shard back to reading) and
  checks each named chunk exists with the recorded size; A's orphan chunks (other bytes,
  so other names, on no chain) are deleted with the rest of the run's orphans. A chunk A
  writes after that cleanup is an unnamed leftover (invisible to readers, removed by
  ``mode="overwrite"``), or, if it holds a published chunk's bytes, that chunk's name,
  which it leaves as it was.

Assumptions
===========
- **Clocks agree within the lease TTL** (default 30 s, ``SHARDWRIGHT_LEASE_TTL``): a lease
  is stale when its heartbeat is older than the TTL by the reader's clock.
- **Rename is atomic** and a directory fsync makes it durable (local disk); an S3 PUT or a
  completed multipart upload, a completed GCS upload, an Azure Put Blob or Put Block List is
  atomic and durable when it returns.
- **fsync is honest**: after ``barrier()`` (``syncfs``, or an fsync per file) the bytes
  survive a power cut.
- **The object store honours conditional writes**: ``If-None-Match: *`` (create) and
  ``If-Match: etag`` (compare-and-swap) on S3 and Azure, ``ifGenerationMatch=0`` and
  ``ifGenerationMatch=<generation>`` on GCS, are atomic; exactly one of racing writers wins.
  Where a test emulator does not enforce a precondition the protocol never relies on that
  path: fake-gcs-server ignores ``ifGenerationMatch`` on resumable uploads (with or without a
  chunk size), media uploads, copies and deletes, so the GCS backend makes every conditional
  write one multipart upload, at any size, and deletes nothing conditionally (steps 0-6 need
  no conditional delete). What a store may do
  around a conditional write (apply it and lose the reply, fail before or after applying it)
  is proven on the memory backend with its fault hooks (``fail_next(..., after=True)``,
  ``fail_when``, ``crash``) and through the fault proxy on SeaweedFS, fake-gcs-server and
  Azurite; a lost reply is recognised by reading the object back (ours iff it holds our
  bytes, which carry the run id). See docs/clouds.md for what each emulator verifies.
- **A torn file reads as empty or NUL bytes** after a power cut (what ext4/xfs leave of
  data that never reached the disk), never as a valid older record.
- A process whose lease was taken over notices at its next heartbeat (or its committer at
  its next record write) and stops; until then it may still write (see Fencing for why
  those writes cannot damage what the new holder publishes).

Versioning: see ``layout`` for the rule and history of :data:`PROTOCOL_VERSION`.
"""

from __future__ import annotations

from .layout import PROTOCOL_VERSION

__all__ = ["PROTOCOL_VERSION"]
