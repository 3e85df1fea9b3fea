#!/usr/bin/env python
"""The asyncio baseline of synthetic data generation that shardwright is measured against
(issue 32): what a user writes in ~120 lines instead of a framework.

For each document (a text file, pages separated by form feeds) and each page, call the
teacher ``--calls`` times and append one JSON line per answer to ``--out``. At most
``--concurrency`` calls are in flight (one semaphore, one aiohttp session); a 429/5xx,
timeout or dropped connection is retried for that one call with exponential backoff, full
jitter and the server's Retry-After. Resuming is skipping the keys already in the JSONL: on
SIGINT/SIGTERM no new call starts and the calls in flight finish and are written (so none is
repeated), a SIGKILL loses the calls in flight (and perhaps a cut last line, skipped on resume).

    python benchmarks/sdg_baseline.py --url http://127.0.0.1:PORT/v1 --docs DIR --out samples.jsonl

It has no rate limit, no order (lines are in completion order), no status beyond the file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import time

import aiohttp

TRANSIENT = {408, 425, 429} | set(range(500, 600))


class Transient(Exception):
    def __init__(self, status: int, retry_after: float | None):
        super().__init__(f"HTTP {status}")
        self.status, self.retry_after = status, retry_after


def load_documents(folder: str) -> list[tuple[str, list[str]]]:
    docs = []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            docs.append((name, f.read().split("\f")))
    return docs


def done_keys(path: str) -> set[str]:
    keys: set[str] = set()
    if not os.path.exists(path):
        return keys
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                keys.add(json.loads(line)["key"])
            except (ValueError, KeyError):
                pass  # a line cut by a kill: its call is made again
    return keys


async def ask(session: aiohttp.ClientSession, url: str, key: str, prompt: str) -> str:
    body = {"model": "teacher", "user": key, "messages": [{"role": "user", "content": prompt}]}
    async with session.post(f"{url}/chat/completions", json=body) as response:
        if response.status in TRANSIENT:
            after = response.headers.get("Retry-After")
            raise Transient(response.status, float(after) if after else None)
        response.raise_for_status()
        reply = await response.json()
    return reply["choices"][0]["message"]["content"]


async def call_with_retries(session, url, key, prompt, retries=8, base=0.5, cap=30.0) -> str:
    for attempt in range(retries + 1):
        try:
            return await ask(session, url, key, prompt)
        except (Transient, aiohttp.ClientConnectionError, asyncio.TimeoutError) as exc:
            if attempt == retries:
                raise
            delay = random.uniform(0, min(cap, base * 2**attempt))
            after = getattr(exc, "retry_after", None)
            await asyncio.sleep(max(delay, after or 0.0))
    raise AssertionError("unreachable")


async def run(url: str, docs_dir: str, out: str, calls: int, concurrency: int) -> int:
    skip = done_keys(out)
    semaphore = asyncio.Semaphore(concurrency)
    stopping = asyncio.Event()  # SIGINT/SIGTERM: start no new call, let those in flight finish
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stopping.set)
    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=120)
    made = 0
    with open(out, "a", encoding="utf-8") as sink:

        async def one(doc: str, page: int, call: int, text: str) -> None:
            nonlocal made
            key = f"{doc}/p{page}/c{call}"
            async with semaphore:
                if stopping.is_set():
                    return
                prompt = f"Write question {call} about this page:\n{text[:2000]}"
                answer = await call_with_retries(session, url, key, prompt)
            record = {"key": key, "doc": doc, "page": page, "call": call, "text": answer}
            sink.write(json.dumps(record) + "\n")
            sink.flush()  # in the kernel at once: a SIGINT/SIGKILL of this process keeps it
            made += 1

        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            jobs = [
                one(doc, p, c, text)
                for doc, pages in load_documents(docs_dir)
                for p, text in enumerate(pages)
                for c in range(calls)
                if f"{doc}/p{p}/c{c}" not in skip
            ]
            await asyncio.gather(*jobs)
    if stopping.is_set():
        print(f"stopped: {made} samples written, rerun to resume", file=sys.stderr)
        return -made
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the teacher's base URL, ending in /v1")
    parser.add_argument("--docs", required=True, help="a folder of documents, pages separated by \\f")
    parser.add_argument("--out", required=True, help="the JSONL file samples are appended to")
    parser.add_argument("--calls", type=int, default=3, help="calls per page")
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    made = asyncio.run(run(args.url, args.docs, args.out, args.calls, args.concurrency))
    print(json.dumps({"samples": abs(made), "seconds": round(time.perf_counter() - started, 3)}))
    return 130 if made < 0 else 0  # stopped by a signal: not finished


if __name__ == "__main__":
    sys.exit(main())
