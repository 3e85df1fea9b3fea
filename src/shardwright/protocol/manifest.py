"""The run manifest: the identity of the run in progress (the last finished run's record is
:mod:`.run_record`)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from ..errors import CorruptStateError
from ..format import ChunkEntry, IndexConfig
from ..storage import Storage
from .fn_identity import FnIdentity
from .hints import START_OVER, naming_output
from .jsonio import dumps, field_problem, loads_object, read_state, require_field
from .layout import (
    MANIFEST_KEY,
    PROTOCOL_VERSION,
    RESUMABLE_PROTOCOLS,
    SEALED_RECORDS_PROTOCOL,
    SEALED_RUN_ID_PREFIX,
    chunk_generation,
)
from .shards import MAX_NUM_SHARDS, clamp_num_shards, shard_bounds

MAX_INPUTS = 2**48  # inputs of one run: any count read from disk beyond this was edited by hand


@dataclass(frozen=True)
class OutputSettings:
    """The settings that shape the output: a resume must use the same ones."""

    chunk_size: int | None
    chunk_bytes: int | None
    compression: str | None
    num_shards: int
    item_loader: str = "PyTreeLoader"  # or "TokensLoader": raw token items, chunk entries with dim

    def to_json(self) -> dict:
        settings = {
            "chunk_size": self.chunk_size,
            "chunk_bytes": self.chunk_bytes,
            "compression": self.compression,
            "num_shards": self.num_shards,
        }
        if self.item_loader != "PyTreeLoader":  # only then: runs recorded before the key existed still match
            settings["item_loader"] = self.item_loader
        return settings

    @classmethod
    def from_json(cls, data: dict, where: str) -> OutputSettings:
        def optional_int(name: str) -> int | None:
            value = data.get(name)
            if value is not None and (type(value) is not int or value < 1):
                raise CorruptStateError(
                    f"run settings in {where} have an invalid {name!r} ({value!r}); it was edited by hand. {START_OVER}"
                )
            return value

        compression = data.get("compression")
        num_shards = data.get("num_shards")
        if (
            compression not in (None, "zstd")
            or type(num_shards) is not int
            or num_shards < 1
            or not all(k in data for k in ("chunk_size", "chunk_bytes"))
        ):
            raise CorruptStateError(
                f"run settings in {where} are incomplete or invalid; it was edited by hand. {START_OVER}"
            )
        item_loader = data.get("item_loader", "PyTreeLoader")
        if item_loader not in ("PyTreeLoader", "TokensLoader"):
            raise CorruptStateError(
                f"run settings in {where} have an invalid item_loader ({item_loader!r:.40}); "
                f"it was edited by hand. {START_OVER}"
            )
        return cls(optional_int("chunk_size"), optional_int("chunk_bytes"), compression, num_shards, item_loader)

    def first_difference(self, other: OutputSettings) -> tuple[str, object, object] | None:
        """(name, recorded value, current value) of the first setting that differs, or None:
        a setting the call passes first (``chunk_size=2`` rather than the ``chunk_bytes=None``
        that comes with it)."""
        keys = changed_settings(self.to_json(), other.to_json())
        return (keys[0], self.to_json()[keys[0]], other.to_json()[keys[0]]) if keys else None


def changed_settings(recorded: dict, current: dict) -> list[str]:
    """The settings whose values differ, those the current call sets (not None) first."""
    keys = sorted(k for k in current if recorded.get(k) != current[k])
    return sorted(keys, key=lambda k: current[k] is None)


def describe_settings_change(recorded: dict, current: dict) -> tuple[str, str] | None:
    """(``chunk_size was 100, now 200 (and chunk_bytes was 65536, now None)``, ``chunk_size=100,
    chunk_bytes=65536``) for a message: every setting that differs, with what to rerun with."""
    keys = changed_settings(recorded, current)
    if not keys:
        return None
    first, rest = keys[0], keys[1:]
    what = f"{first} was {recorded.get(first)!r}, now {current[first]!r}"
    if rest:
        what += " (and " + ", ".join(f"{k} was {recorded.get(k)!r}, now {current[k]!r}" for k in rest) + ")"
    return what, ", ".join(f"{k}={recorded.get(k)!r}" for k in keys)


@dataclass(frozen=True)
class Manifest:
    """Identity of the run in progress; created once, never rewritten while the run lives."""

    run_id: str
    generation: int  # chunk files of this run are chunk-{generation}-*
    mode: str  # "create" or "append"
    num_inputs: int
    num_shards: int
    inputs: dict  # InputsFingerprint.to_json()
    settings: OutputSettings  # what shapes the output; compared on resume
    use_checkpoint: bool
    base_chunks: list  # append mode: ChunkEntry json of the dataset as it was
    base_config: dict | None
    fn_name: str
    created_at: float
    input_ids: list | None = None  # a retry run: the run-wide ids of the inputs it redoes
    input_skips: list | None = None  # ... and how many outputs of each were committed before
    fn_code: str = ""  # digest of fn's code (engine.options.fn_code); "" when unknown
    input_files: dict | None = None  # InputFiles.to_json(): size+mtime of inputs that are file paths
    fn_identity: dict | None = None  # FnIdentity.to_json(); None in manifests written before it existed
    protocol: int = PROTOCOL_VERSION
    # sources (issue 17): an incremental run's positions of the call's inputs, as [a, b) ranges
    input_ranges: list | None = None
    range_skips: list | None = None  # ... and [position, outputs already in the dataset] of retried inputs

    @property
    def records_sealed(self) -> bool:
        """Every record file of this run carries its checksum (written by protocol 7 on), so
        one without it was edited by hand (records.parse_record_file). The run id says so too:
        a manifest edited back to an older protocol does not unseal the run (layout)."""
        return self.protocol >= SEALED_RECORDS_PROTOCOL or self.run_id.startswith(SEALED_RUN_ID_PREFIX)

    def fn(self) -> FnIdentity:
        """The fn this run was started with (configuration None when it was not recorded)."""
        if self.fn_identity is not None:
            return FnIdentity.from_json(self.fn_identity, "the run manifest")
        return FnIdentity(name=self.fn_name, code=self.fn_code)

    def to_json(self) -> dict:
        data = asdict(self)
        data["settings"] = self.settings.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict, where: str) -> Manifest:
        what = "run manifest"
        protocol = data.get("protocol")
        # a protocol that is not a whole number (trust round 10: "7", a string) or that no
        # version wrote is damage, not a version to go and find
        damage = field_problem(data, "protocol", int)
        if damage is None and isinstance(protocol, int) and protocol < 1:
            damage = f"has protocol {protocol}"
        if damage is not None:
            raise CorruptStateError(
                f"{what} {where} {damage}: the manifest is damaged or was edited by hand (it is not another "
                f"version's). {START_OVER}"
            )
        if protocol not in RESUMABLE_PROTOCOLS:
            raise CorruptStateError(
                f"{what} {where} has protocol {data.get('protocol')!r}, this shardwright writes {PROTOCOL_VERSION}; "
                "finish the run with the shardwright version that started it, or rerun with mode='overwrite'"
            )
        return cls(
            run_id=require_field(data, "run_id", str, what, where),
            generation=require_field(data, "generation", int, what, where),
            mode=require_field(data, "mode", str, what, where),
            num_inputs=require_field(data, "num_inputs", int, what, where),
            num_shards=require_field(data, "num_shards", int, what, where),
            inputs=require_field(data, "inputs", dict, what, where),
            settings=OutputSettings.from_json(require_field(data, "settings", dict, what, where), where),
            use_checkpoint=require_field(data, "use_checkpoint", bool, what, where),
            base_chunks=require_field(data, "base_chunks", list, what, where),
            base_config=_optional(data, "base_config", dict, where),
            fn_name=require_field(data, "fn_name", str, what, where),
            created_at=float(require_field(data, "created_at", (int, float), what, where)),
            input_ids=_optional(data, "input_ids", list, where),
            input_skips=_optional(data, "input_skips", list, where),
            fn_code=_optional(data, "fn_code", str, where) or "",
            input_files=_optional(data, "input_files", dict, where),
            fn_identity=_fn_identity_json(data.get("fn_identity"), where),
            input_ranges=_optional(data, "input_ranges", list, where),
            range_skips=_optional(data, "range_skips", list, where),
            protocol=protocol,
        ).validated(where)

    def validated(self, where: str) -> Manifest:
        """Catch hand edits that parse but would publish a wrong dataset."""
        problem = None
        inputs = self.inputs
        if not (
            type(inputs.get("count")) is int
            and type(inputs.get("block_size")) is int
            and isinstance(inputs.get("block_hashes"), str)
        ):
            problem = "its inputs fingerprint is incomplete"
        elif self.generation < 0:
            problem = f"generation {self.generation} is negative"
        elif self.input_ranges is not None and not ranges_valid(self.input_ranges, self.num_inputs, inputs["count"]):
            problem = "its incremental input ranges are invalid"
        elif self.range_skips is not None and not (
            isinstance(self.range_skips, list)
            and all(
                isinstance(p, list) and len(p) == 2 and all(type(x) is int and 0 <= x <= MAX_INPUTS for x in p)
                for p in self.range_skips
            )
        ):
            problem = "its incremental skips are invalid"
        elif self.input_ids is None and self.input_ranges is None and self.num_inputs != inputs["count"]:
            problem = f"num_inputs {self.num_inputs} differs from the fingerprint's {inputs['count']}"
        elif self.num_shards != clamp_num_shards(self.num_shards, self.num_inputs):
            problem = f"num_shards {self.num_shards} is out of range for {self.num_inputs} inputs"
        elif self.input_ids is not None and not (
            isinstance(self.input_ids, list)
            and len(self.input_ids) == self.num_inputs
            and all(type(i) is int and 0 <= i < inputs["count"] for i in self.input_ids)
            and isinstance(self.input_skips, list)
            and len(self.input_skips) == self.num_inputs
            and all(type(k) is int and 0 <= k <= MAX_INPUTS for k in self.input_skips)
        ):
            problem = "its retry input list is invalid"
        elif not 0 <= self.num_inputs <= MAX_INPUTS or not 0 <= self.generation <= MAX_INPUTS:
            problem = "its input count or generation is out of range"
        elif not 0 <= self.created_at < 1e11:  # seconds since 1970; also rejects NaN
            problem = f"created_at {self.created_at!r} is not a time"
        elif len(self.base_chunks) > 10 * MAX_NUM_SHARDS * 1000:
            problem = f"it lists {len(self.base_chunks):,} base chunks"
        elif self.num_shards > MAX_NUM_SHARDS:
            problem = f"num_shards {self.num_shards:,} is over the limit of {MAX_NUM_SHARDS:,}"
        elif len(inputs["block_hashes"]) != 16 * -(-inputs["count"] // max(1, inputs["block_size"])):
            problem = "its inputs fingerprint does not match its input count"
        if problem:
            raise CorruptStateError(
                f"run manifest {where} is invalid ({problem}); it was damaged or edited by hand. " + START_OVER
            )
        return self

    def shard_bounds(self) -> dict[int, tuple[int, int]]:
        return {s: shard_bounds(self.num_inputs, self.num_shards, s) for s in range(self.num_shards)}


def ranges_valid(ranges: object, total: int, count: int) -> bool:
    """Sorted, disjoint, non-empty [a, b) ranges within ``count`` covering ``total`` positions."""
    if not isinstance(ranges, list) or len(ranges) > MAX_INPUTS:
        return False
    previous, covered = -1, 0
    for r in ranges:
        if not (isinstance(r, list) and len(r) == 2 and all(type(x) is int for x in r) and previous <= r[0] < r[1]):
            return False
        previous = r[1]
        covered += r[1] - r[0]
    return previous <= count and covered == total


def read_manifest(storage: Storage) -> Manifest | None:
    try:
        data = read_state(storage, MANIFEST_KEY, "run manifest")
    except FileNotFoundError:
        return None
    try:
        return Manifest.from_json(
            loads_object(data, "run manifest", storage, MANIFEST_KEY), f"{storage.url}/{MANIFEST_KEY}"
        )
    except CorruptStateError as damaged:  # the line to paste names this output, not OUTPUT_DIR
        raise CorruptStateError(naming_output(str(damaged), storage.url)) from None


def new_manifest(
    *,
    generation: int,
    mode: str,
    num_inputs: int,
    num_shards: int,
    inputs: dict,
    settings: OutputSettings,
    use_checkpoint: bool,
    fn_name: str,
    fn_identity: FnIdentity | None = None,
    fn_code: str = "",
    base_chunks: Sequence[ChunkEntry] = (),
    base_config: IndexConfig | None = None,
    input_ids: Sequence[int] | None = None,
    input_skips: Sequence[int] | None = None,
    input_files: dict | None = None,
    input_ranges: Sequence[tuple[int, int]] | None = None,
    range_skips: Sequence[tuple[int, int]] | None = None,
) -> Manifest:
    """A new run's manifest (a fresh run id, created now) from typed parts: the one place a
    manifest is made rather than read."""
    return Manifest(
        run_id=SEALED_RUN_ID_PREFIX + uuid.uuid4().hex,
        generation=generation,
        mode=mode,
        num_inputs=num_inputs,
        num_shards=num_shards,
        inputs=inputs,
        input_ids=list(input_ids) if input_ids is not None else None,
        input_skips=list(input_skips) if input_skips is not None else None,
        settings=settings,
        use_checkpoint=use_checkpoint,
        base_chunks=[c.to_json() for c in base_chunks],
        base_config=base_config.to_json() if base_config else None,
        fn_name=fn_name,
        created_at=time.time(),
        fn_code=fn_code,
        input_files=input_files,
        fn_identity=fn_identity.to_json() if fn_identity is not None else None,
        input_ranges=[list(r) for r in input_ranges] if input_ranges is not None else None,
        range_skips=[list(p) for p in range_skips] if range_skips else None,
    )


def create_manifest(storage: Storage, manifest: Manifest) -> Manifest:
    """Create the manifest unless one exists (several nodes may start at once): returns the one
    that won, which callers compare with theirs."""
    if storage.create_exclusive(MANIFEST_KEY, dumps(manifest.to_json())):
        return manifest
    existing = read_manifest(storage)
    if existing is None:  # deleted between our attempt and the read: a finished run; try again
        return create_manifest(storage, manifest)
    return existing


def _optional(data: dict, name: str, kind: type, where: str):
    """An optional field of the manifest: absent or null is None, anything else must be of
    ``kind`` (a wrong type is damage: an input_files that was silently dropped turned off the
    check that the input files are unchanged)."""
    if data.get(name) is None:
        return None
    return require_field(data, name, kind, "run manifest", where)


def _fn_identity_json(data: object, where: str) -> dict | None:
    """The manifest's fn identity, checked now (absent in older manifests: None)."""
    if data is None:
        return None
    return FnIdentity.from_json(data, where).to_json()


def is_published(index_chunks: Sequence[ChunkEntry], manifest: Manifest) -> bool:
    """True when index.json already holds this run's chunks (a crash between publishing and
    cleanup). A run that produced no chunk can't be told apart, but publishing it again is
    harmless."""
    return any(chunk_generation(c.filename) == manifest.generation for c in index_chunks)
