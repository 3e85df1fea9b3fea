"""Run manifests as the unit tests record them: a run "run" of generation 0 over ``inputs``,
created with checkpoints and no base dataset, the rest given where a test cares."""

from __future__ import annotations

from typing import Any

from shardwright.protocol.fingerprint import InputsFingerprint
from shardwright.protocol.manifest import Manifest, OutputSettings


def recorded_manifest(
    inputs: list,
    *,
    chunk_size: int | None = 1,
    num_shards: int = 2,
    settings: OutputSettings | None = None,
    fn_name: str = "m.f",
    created_at: float = 0.0,
    **more: Any,
) -> Manifest:
    """A manifest recorded for a run over ``inputs`` (``settings`` else chunk_size, no
    compression, ``num_shards`` shards); ``more`` sets any other field (input_files, fn_code, ...)."""
    if settings is None:
        settings = OutputSettings(chunk_size=chunk_size, chunk_bytes=None, compression=None, num_shards=num_shards)
    return Manifest(
        run_id="run",
        generation=0,
        mode="create",
        num_inputs=len(inputs),
        num_shards=num_shards,
        inputs=InputsFingerprint.of(inputs).to_json(),
        settings=settings,
        use_checkpoint=True,
        base_chunks=[],
        base_config=None,
        fn_name=fn_name,
        created_at=created_at,
        **more,
    )
