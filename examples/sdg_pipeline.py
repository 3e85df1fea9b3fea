"""Synthetic data generation: for each document, for each page, ask a teacher LLM a few
questions over HTTP; one sample per answer (docs/sdg.md explains the model).

    # a demo against a loopback teacher it starts itself (3 % 429s, 1 % 500s), interrupted once:
    .venv/bin/python examples/sdg_pipeline.py
    # your own teacher (any OpenAI-compatible endpoint), documents and budget:
    .venv/bin/python examples/sdg_pipeline.py --url https://api.example.com/v1 --docs DIR --out DIR \
        --model my-model --rate 600/min

Each document is an input; its pages are separated by form feeds. fn is an ``async def``
generator: it asks the page's questions at once, yields one sample per answer, then
``ResumePoint({"page": p + 1})``, so an interrupted document resumes at the next page, not
page 0. Each call is retried on its own (429 with Retry-After, 5xx, timeouts) with backoff, and
takes its start from the node's rate budget (shared by the workers of the node, split evenly
across nodes). Needs the ``sdg`` extra (aiohttp).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import aiohttp

import shardwright
from shardwright.engine.calls import RetryPolicy, retry_async
from shardwright.engine.limits import Limiter, default_budget_path

# ResumePoint and optimize(concurrency=) come with issue 32's engine work; without them the
# example still runs, one document at a time per worker, and an interrupted document restarts
# at page 0 (said when it starts).
HAVE_RESUME = hasattr(shardwright, "ResumePoint")


@dataclass(frozen=True)
class Config:
    """Everything that shapes the samples (part of the run: change it and start a new output)."""

    url: str  # the teacher's OpenAI-compatible base URL, ending in /v1
    model: str = "teacher"
    questions_per_page: int = 3
    rate: str | None = None  # the whole run's budget, e.g. "600/min"; each node takes an even share
    budget_name: str = "sdg"  # the node's budget file: the same name for every worker of the run
    num_nodes: int = 1


_limiters: dict[tuple[int, str], Limiter] = {}


def _limiter(config: Config) -> Limiter | None:
    """One Limiter per worker process; they share the node's budget through its file."""
    if config.rate is None:
        return None
    key = (os.getpid(), config.budget_name)
    if key not in _limiters:
        _limiters[key] = Limiter(config.rate, name=config.budget_name, num_nodes=config.num_nodes)
    return _limiters[key]


async def ask(session: aiohttp.ClientSession, config: Config, key: str, prompt: str) -> str:
    """One call, retried while it fails transiently (aiohttp's errors carry the status and the
    Retry-After header; engine.calls reads them)."""
    body = {"model": config.model, "user": key, "messages": [{"role": "user", "content": prompt}]}
    headers = {"Authorization": f"Bearer {os.environ['TEACHER_API_KEY']}"} if "TEACHER_API_KEY" in os.environ else {}
    limiter = _limiter(config)

    async def once() -> str:
        async def post() -> str:
            async with session.post(f"{config.url}/chat/completions", json=body, headers=headers) as response:
                response.raise_for_status()
                reply = await response.json()
            return reply["choices"][0]["message"]["content"]

        if limiter is None:
            return await post()
        async with limiter.slot():  # no call starts over the node's budget
            return await post()

    return await retry_async(once, RetryPolicy())


def _page_requests(path: str, config: Config, page: int, text: str) -> list[tuple[str, str]]:
    doc = os.path.basename(path)
    return [
        (f"{doc}/p{page}/q{q}", f"Ask question {q + 1} a student would ask about this page:\n{text[:4000]}")
        for q in range(config.questions_per_page)
    ]


def _sample(path: str, page: int, q: int, key: str, answer: str) -> dict:
    return {"doc": os.path.basename(path), "page": page, "question": q, "key": key, "text": answer}


async def generate(path: str, resume: dict | None = None, *, config: dict):
    """fn: one document's samples, page by page from ``resume`` (shardwright passes the last
    ResumePoint's state after an interruption). ``config`` is a Config as a dict: a run
    compares plain values with the interrupted run's, so a changed config is noticed."""
    settings = Config(**config)
    with open(path, encoding="utf-8") as f:
        pages = f.read().split("\f")
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
        for page in range((resume or {}).get("page", 0), len(pages)):
            requests = _page_requests(path, settings, page, pages[page])
            answers = await asyncio.gather(*(ask(session, settings, key, prompt) for key, prompt in requests))
            for q, ((key, _), answer) in enumerate(zip(requests, answers)):
                yield _sample(path, page, q, key, answer)
            yield shardwright.ResumePoint({"page": page + 1})  # the pages before it are never asked again


def generate_without_resume(path: str, *, config: dict):
    """FALLBACK for an engine without ResumePoint/concurrency=: a plain generator, the page's
    questions still asked at once; an interrupted document restarts at page 0."""
    settings = Config(**config)
    with open(path, encoding="utf-8") as f:
        pages = f.read().split("\f")

    async def one_page(page: int) -> list[dict]:
        requests = _page_requests(path, settings, page, pages[page])
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
            answers = await asyncio.gather(*(ask(session, settings, key, prompt) for key, prompt in requests))
        return [_sample(path, page, q, key, a) for q, ((key, _), a) in enumerate(zip(requests, answers))]

    for page in range(len(pages)):
        yield from asyncio.run(one_page(page))


def run(docs: str, out: str, config: Config, num_workers: int = 2, concurrency: int = 32) -> None:
    inputs = [os.path.join(docs, name) for name in sorted(os.listdir(docs))]
    if HAVE_RESUME:
        fn = functools.partial(generate, config=dataclasses.asdict(config))
        shardwright.optimize(fn, inputs, out, num_workers=num_workers, concurrency=concurrency)  # type: ignore[call-arg]
    else:
        print(
            "NOTE: this shardwright has no ResumePoint yet: one document at a time per worker, no resume in a document"
        )
        fn = functools.partial(generate_without_resume, config=dataclasses.asdict(config))
        shardwright.optimize(fn, inputs, out, num_workers=num_workers)


def demo() -> None:
    """Start a loopback teacher, write 6 documents, run, SIGINT it mid-run, resume, count."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    from support.teacher import TeacherProcess, read_log, repeated_calls

    root = tempfile.mkdtemp(prefix="shardwright-sdg-")
    docs, out, log = os.path.join(root, "docs"), os.path.join(root, "dataset"), os.path.join(root, "calls.log")
    os.makedirs(docs)
    for d in range(6):
        with open(os.path.join(docs, f"doc{d:03d}.txt"), "w", encoding="utf-8") as f:
            f.write("\f".join(f"document {d}, page {p}: some knowledge worth asking about." for p in range(12)))
    with TeacherProcess(latency=0.3, p_429=0.03, p_500=0.01, retry_after=1, log=log) as teacher:
        budget = hashlib.blake2b(root.encode(), digest_size=6).hexdigest()
        child = [sys.executable, __file__, "--url", teacher.url, "--docs", docs, "--out", out, "--rate", "100/s"]
        child += ["--budget-name", f"sdg-demo-{budget}"]
        print(f"1. generating into {out}; SIGINT after 2 s")
        proc = subprocess.Popen(child)
        time.sleep(2)  # a demo: let it get somewhere, then interrupt it as a user would
        proc.send_signal(signal.SIGINT)
        proc.wait()
        print(f"   interrupted after {sum(1 for c in read_log(log) if c.status == '200')} answered calls")
        print("2. the same command again: it resumes")
        subprocess.run(child, check=True)
    os.unlink(default_budget_path(f"sdg-demo-{budget}"))  # the node's budget file in /dev/shm
    calls = read_log(log)
    samples = len(shardwright.StreamingDataset(out))
    print(
        f"3. {samples} samples; the teacher answered {sum(c.status == '200' for c in calls)} calls, "
        f"{repeated_calls(calls)} of them repeated; {sum(c.status != '200' for c in calls)} 429/500s retried"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="the teacher's OpenAI-compatible base URL (without: the demo)")
    parser.add_argument("--docs", help="a folder of documents, pages separated by form feeds")
    parser.add_argument("--out", help="the output dataset (a local path or s3://, gs://, az://)")
    parser.add_argument("--model", default="teacher")
    parser.add_argument("--questions", type=int, default=3, help="questions per page")
    parser.add_argument("--rate", default=None, help='the run\'s budget of calls, e.g. "600/min"')
    parser.add_argument("--budget-name", default="sdg")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32, help="documents in flight per worker")
    args = parser.parse_args()
    if args.url is None:
        demo()
        return
    if not (args.docs and args.out):
        parser.error("--url needs --docs and --out")
    config = Config(args.url, args.model, args.questions, args.rate, args.budget_name)
    run(args.docs, args.out, config, args.workers, args.concurrency)


if __name__ == "__main__":
    main()
