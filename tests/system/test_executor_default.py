"""executor="local" stays the default when RAY_ADDRESS is set: a plain call never touches Ray."""

from __future__ import annotations

from shardwright import optimize


def ident(i):
    return {"i": i}


def test_local_stays_the_default_when_ray_address_is_set(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # nothing listens there: touching Ray would hang or fail
    result = optimize(ident, list(range(5)), tmp_path / "out", num_workers=1, verbose=False)
    assert result.published and result.items == 5
