#!/usr/bin/env python
"""CPU seconds of the Azure backend's ``download_to`` (issue 36): 8 blobs of 16 MiB (the cold
reader's chunks) downloaded from Azurite (started here), repeated; this process's CPU (the
client) and Azurite's, per pass, sorted. Compare two trees by PYTHONPATH, alternated:

    PYTHONPATH=/work/main/src .venv/bin/python benchmarks/bench_azure_download.py
    PYTHONPATH=src .venv/bin/python benchmarks/bench_azure_download.py --passes 5
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))  # the test support package (the emulators)

_MiB = 1024 * 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--blobs", type=int, default=8)
    ap.add_argument("--mib", type=int, default=16)
    args = ap.parse_args()

    from shardwright.storage import open_storage
    from support.cloudemulators import AzuriteServer

    srv = AzuriteServer().start()
    try:
        s = open_storage(f"az://{srv.create_container()}/d", srv.storage_options)
        for i in range(args.blobs):
            s.write_bytes(f"c{i}", os.urandom(args.mib * _MiB))
        emulator = psutil.Process().children(recursive=True)

        def emulator_cpu() -> float:
            return sum(sum(p.cpu_times()[:2]) for p in emulator if p.is_running())

        out = tempfile.mkdtemp(prefix="sw-azdl-")
        rows = []
        for _ in range(args.passes):
            client0, emu0, wall0 = time.process_time(), emulator_cpu(), time.perf_counter()
            for i in range(args.blobs):
                s.download_to(f"c{i}", os.path.join(out, f"c{i}"), durable=False)
            rows.append((time.process_time() - client0, emulator_cpu() - emu0, time.perf_counter() - wall0))
            for i in range(args.blobs):
                os.unlink(os.path.join(out, f"c{i}"))
        os.rmdir(out)
    finally:
        srv.stop()
    print(
        json.dumps(
            {
                name: sorted(round(r[k], 3) for r in rows)
                for k, name in enumerate(("client CPU s", "Azurite CPU s", "wall s"))
            }
        )
    )


if __name__ == "__main__":
    main()
