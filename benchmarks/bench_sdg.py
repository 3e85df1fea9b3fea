#!/usr/bin/env python
"""Synthetic data generation against a teacher LLM: shardwright vs the asyncio baseline
(benchmarks/sdg_baseline.py), side by side in one run (issue 32).

    .venv/bin/python benchmarks/bench_sdg.py                     # 20 docs x ~18 pages x 3 calls, open and budget
    .venv/bin/python benchmarks/bench_sdg.py --scenarios open    # throughput only
    .venv/bin/python benchmarks/bench_sdg.py --docs 4 --json out.json

The workload: 20 documents of 14-23 pages (seeded; 370 pages), 3 calls per page (1,110
calls), against the loopback teacher (tests/support/teacher.py, its own process) at 0.3 s
latency with 3 % 429s (Retry-After: 1) and 1 % 500s. Each leg is a fresh process with a fresh
teacher (so its call log is its own):

- ``baseline``: sdg_baseline.py, 64 calls in flight (a semaphore), aiohttp, one JSONL.
- ``shardwright``: optimize(num_workers=2, concurrency=32) of an ``async def`` generator over
  the documents, yielding 3 samples and a ResumePoint per page, each call retried with
  engine.calls.retry_async and capped at ``--in-flight`` (32) calls per worker process, as many
  as the baseline's 64 in all (a Limiter's AdaptiveLimit). A document's pages are sequential
  (a page's samples, then its ResumePoint), so the calls of the next ``--prefetch`` pages (3)
  start early; 0 prefetches nothing (a SIGINT then repeats no call; with prefetching, the
  prefetched calls in flight at the stop are lost). Before optimize() takes ``concurrency=``
  (detected with inspect.signature) it runs a plain generator fn, one call at a time per
  worker, and says so. ``--num-shards`` passes num_shards (the default: the engine's).

Scenarios: ``open`` (no budget: throughput) and ``budget`` (the teacher refuses calls above
100/s, a 100-call burst; shardwright's fn takes each call's start from a Limiter("100/s")
shared by the node's workers; the baseline has none and retries what it is refused).

Figures per leg: samples/s, CPU ms per sample (user+sys of the leg's whole process tree,
from wait4), peak RSS and PSS of the whole tree (sampled every 0.1 s from /proc: RSS counts
pages shared by forked workers once per process, PSS splits them), the calls the teacher
saw, the calls repeated (a key answered 200 twice), over-budget calls (refused by the
budget) and the teacher's peak of calls in flight; then shardwright / baseline, and in the
budget scenario the calls accepted per second from the first call to the last. Every leg's
output is checked (every sample exactly once; shardwright's in input order): a broken leg
fails the benchmark. The machine's load average is printed before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import http.client
import inspect
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))  # support.teacher

CALLS = int(os.environ.get("SDG_CALLS", "3"))
BUDGET_RPS = 100


# --- the shardwright leg's fns (module level: the forked workers run them) -------------------


class TeacherReply(Exception):
    """A non-200 answer, shaped like the clients' errors: engine.calls reads status and headers."""

    def __init__(self, status: int, headers: dict):
        super().__init__(f"HTTP {status}")
        self.status, self.headers = status, headers


def _pages(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return f.read().split("\f")


def _request(doc: str, page: int, call: int, text: str) -> tuple[str, dict]:
    key = f"{doc}/p{page}/c{call}"
    prompt = f"Write question {call} about this page:\n{text[:2000]}"
    return key, {"model": "teacher", "user": key, "messages": [{"role": "user", "content": prompt}]}


_LIMITERS: dict[int, Any] = {}


def _limiter() -> Any:
    """This worker process's Limiter: at most SDG_IN_FLIGHT calls (AIMD: fewer while the teacher
    throttles) and, with SDG_RATE, the node's budget (one file shared by the workers)."""
    if os.getpid() not in _LIMITERS:
        from shardwright.engine.limits import AdaptiveLimit, Limiter

        cap = int(os.environ.get("SDG_IN_FLIGHT", "32"))
        rate = os.environ.get("SDG_RATE") or None
        path = os.environ.get("SDG_BUDGET_PATH") if rate else None
        _LIMITERS[os.getpid()] = Limiter(rate, path=path, concurrency=AdaptiveLimit(cap, maximum=cap))
    return _LIMITERS[os.getpid()]


async def sdg_document(path: str, resume: dict | None = None):
    """One document: for each page from the resume point, its calls at once, then its samples
    and a ResumePoint after the page (with concurrency=: io-core's engine). The calls of the
    next SDG_PREFETCH pages start before a page's samples are yielded (0: none; a stop then
    costs the prefetched calls in flight)."""
    import aiohttp

    from shardwright import ResumePoint  # type: ignore[attr-defined]
    from shardwright.engine.calls import RetryPolicy, retry_async

    url, policy, limiter = os.environ["SDG_URL"], RetryPolicy(), _limiter()
    doc = os.path.basename(path)
    pages = _pages(path)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:

        async def ask(body: dict) -> str:
            async def once() -> str:
                async with limiter.slot():
                    return await post(body)

            return await retry_async(once, policy)  # each call on its own: a 429 repeats no other call

        async def post(body: dict) -> str:
            async with session.post(f"{url}/chat/completions", json=body) as response:
                if response.status != 200:
                    raise TeacherReply(response.status, dict(response.headers))
                reply = await response.json()
            return reply["choices"][0]["message"]["content"]

        prefetch = int(os.environ.get("SDG_PREFETCH", "0"))
        started: dict[int, tuple[list, asyncio.Future]] = {}

        def start(page: int) -> None:
            requests = [_request(doc, page, call, pages[page]) for call in range(CALLS)]
            started[page] = (requests, asyncio.ensure_future(asyncio.gather(*(ask(body) for _, body in requests))))

        try:
            for page in range((resume or {}).get("page", 0), len(pages)):
                for ahead in range(page, min(len(pages), page + 1 + prefetch)):
                    if ahead not in started:
                        start(ahead)
                requests, answers = started.pop(page)
                for call, ((key, _), answer) in enumerate(zip(requests, await answers)):
                    yield {"key": key, "doc": doc, "page": page, "call": call, "text": answer}
                yield ResumePoint({"page": page + 1})
        finally:
            for _, future in started.values():
                future.cancel()


def sdg_document_sync(path: str):
    """The same without concurrency= (today's engine): one call at a time per worker."""
    from shardwright.engine.calls import RetryPolicy, retry_sync

    url = urllib.parse.urlsplit(os.environ["SDG_URL"])
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
    policy, limiter = RetryPolicy(), _limiter()

    def post(body: dict) -> str:
        try:
            connection.request("POST", f"{url.path}/chat/completions", json.dumps(body).encode())
            response = connection.getresponse()
            data = response.read()
        except Exception:
            connection.close()  # reopened by the next request
            raise
        if response.status != 200:
            raise TeacherReply(response.status, dict(response.headers))
        return json.loads(data)["choices"][0]["message"]["content"]

    def once(body: dict) -> str:
        with limiter.slot_sync():
            return post(body)

    doc = os.path.basename(path)
    for page, text in enumerate(_pages(path)):
        for call in range(CALLS):
            key, body = _request(doc, page, call, text)
            answer = retry_sync(functools.partial(once, body), policy)
            yield {"key": key, "doc": doc, "page": page, "call": call, "text": answer}


def run_shardwright_leg(
    docs: str, out: str, workers: int, concurrency: int, num_shards: int | None, durable_every: float | None
) -> None:
    from shardwright import optimize

    inputs = [os.path.join(docs, name) for name in sorted(os.listdir(docs))]
    options: dict[str, Any] = {"num_workers": workers, "num_shards": num_shards, "verbose": False}
    if "concurrency" in inspect.signature(optimize).parameters:
        if durable_every is not None:
            options["durable_every"] = durable_every
        optimize(sdg_document, inputs, out, concurrency=concurrency, **options)
    else:
        optimize(sdg_document_sync, inputs, out, **options)


# --- the driver ------------------------------------------------------------------------------


def make_documents(folder: str, num_docs: int, seed: int = 0) -> list[str]:
    """``num_docs`` documents of 14-23 pages (~1 KB each); the keys every leg must produce."""
    rng = random.Random(seed)
    os.makedirs(folder)
    keys = []
    for d in range(num_docs):
        name = f"doc{d:03d}.txt"
        pages = [
            f"{name} page {p}: " + " ".join(rng.choice("abcdefgh") * 5 for _ in range(160))
            for p in range(rng.randint(14, 23))
        ]
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write("\f".join(pages))
        keys += [f"{name}/p{p}/c{c}" for p in range(len(pages)) for c in range(CALLS)]
    return keys


def _tree(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(parents.get(pid, ()))
    return found


def _memory(pids: list[int]) -> tuple[int, int]:
    rss = pss = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1])
        except OSError:
            pass
    return rss * 1024, pss * 1024


class MemorySampler(threading.Thread):
    """The peak RSS and PSS of a process and all its descendants, every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float = 0.1):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak_rss = self.peak_pss = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            rss, pss = _memory(_tree(self.pid))
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
            self.stopped.wait(self.interval)


def _run_measured(argv: list[str], env: dict, log_path: str) -> dict:
    started = time.perf_counter()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    sampler = MemorySampler(proc.pid)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    sampler.stopped.set()
    sampler.join()
    return {
        "exit": proc.returncode,
        "seconds": seconds,
        "cpu": usage.ru_utime + usage.ru_stime,
        "peak_rss": sampler.peak_rss,
        "peak_pss": sampler.peak_pss,
    }


def _check_baseline(out: str, keys: list[str]) -> str | None:
    with open(out, encoding="utf-8") as f:
        got = [json.loads(line)["key"] for line in f]
    if len(got) != len(keys) or set(got) != set(keys):
        return f"{len(got)} lines, {len(set(got))} distinct keys; expected {len(keys)}"
    return None


def _check_shardwright(out: str, keys: list[str]) -> str | None:
    from shardwright import StreamingDataset

    got = [item["key"] for item in StreamingDataset(out)]
    if got != keys:
        return f"{len(got)} samples ({len(set(got))} distinct), in order: {got[: len(keys)] == keys[: len(got)]}; expected {len(keys)}"
    return None


def leg_command(
    leg: str, work: str, docs: str, url: str, budget: int | None, args: argparse.Namespace
) -> tuple[list[str], dict, str]:
    """The command line and environment of a leg, and where its output goes."""
    env = dict(os.environ, SDG_URL=url, SDG_CALLS=str(CALLS))
    if leg == "baseline":
        out = os.path.join(work, "samples.jsonl")
        argv = [sys.executable, os.path.join(HERE, "sdg_baseline.py"), "--url", url, "--docs", docs]
        argv += ["--out", out, "--calls", str(CALLS), "--concurrency", str(args.baseline_concurrency)]
        return argv, env, out
    out = os.path.join(work, "dataset")
    if budget:
        env["SDG_RATE"], env["SDG_BUDGET_PATH"] = f"{budget}/s", os.path.join(work, "budget")
    env["SDG_PREFETCH"], env["SDG_IN_FLIGHT"] = str(args.prefetch), str(args.in_flight)
    argv = [sys.executable, os.path.abspath(__file__), "--leg", docs, out]
    argv += ["--workers", str(args.workers), "--concurrency", str(args.concurrency)]
    argv += ["--num-shards", str(args.num_shards)] if args.num_shards else []
    argv += ["--durable-every", str(args.durable_every)] if args.durable_every is not None else []
    return argv, env, out


def run_leg(leg: str, scenario: str, root: str, docs: str, keys: list[str], args: argparse.Namespace) -> dict:
    from support.teacher import TeacherProcess, over_budget_calls, read_log, repeated_calls

    work = os.path.join(root, f"{scenario}-{leg}")
    os.makedirs(work)
    calls_log = os.path.join(work, "calls.log")
    budget = BUDGET_RPS if scenario == "budget" else None
    teacher = TeacherProcess(latency=args.latency, p_429=0.03, p_500=0.01, retry_after=1, rps=budget, log=calls_log)
    with teacher:
        argv, env, out = leg_command(leg, work, docs, teacher.url, budget, args)
        measured = _run_measured(argv, env, os.path.join(work, "leg.log"))
        with urllib.request.urlopen(f"http://127.0.0.1:{teacher.port}/stats", timeout=30) as response:
            stats = json.loads(response.read())
    problem = f"exit {measured['exit']} (see {work}/leg.log)" if measured["exit"] else None
    if problem is None:
        problem = _check_baseline(out, keys) if leg == "baseline" else _check_shardwright(out, keys)
    calls = read_log(calls_log)
    samples = len(keys)
    span = max(c.time for c in calls) - min(c.time for c in calls) if len(calls) > 1 else 0.0
    return {
        "leg": leg,
        "scenario": scenario,
        "ok": problem is None,
        "problem": problem,
        "samples": samples,
        "seconds": round(measured["seconds"], 2),
        "samples_per_s": round(samples / measured["seconds"], 1),
        "cpu_ms_per_sample": round(1000 * measured["cpu"] / samples, 2),
        "peak_rss_mb": round(measured["peak_rss"] / 2**20, 1),
        "peak_pss_mb": round(measured["peak_pss"] / 2**20, 1),
        "calls": len(calls),
        "repeated_calls": repeated_calls(calls),
        "over_budget_calls": over_budget_calls(calls),
        "peak_in_flight": stats["peak_in_flight"],
        "calls_span_s": round(span, 2),  # first call to last: the budget's use, without start-up
        "accepted_per_s": round(sum(c.status != "429b" for c in calls) / span, 1) if span else 0.0,
        "mode": _shardwright_mode(args) if leg == "shardwright" else f"semaphore({args.baseline_concurrency})",
    }


def _shardwright_mode(args: argparse.Namespace) -> str:
    from shardwright import optimize

    shards = f", num_shards={args.num_shards}" if args.num_shards else ""
    shards += f", durable_every={args.durable_every:g}" if args.durable_every is not None else ""
    if "concurrency" in inspect.signature(optimize).parameters:
        return (
            f"optimize(num_workers={args.workers}, concurrency={args.concurrency}{shards}), async generator, a "
            f"ResumePoint per page, {args.prefetch} page(s) prefetched, at most {args.in_flight} calls per worker"
        )
    return f"optimize(num_workers={args.workers}{shards}), plain generator: NO concurrency= in this engine yet"


def _answered(path: str) -> int:
    try:
        with open(path) as f:
            return sum(1 for line in f if line.startswith("200 "))
    except FileNotFoundError:
        return 0


def run_interrupted(leg: str, sig: signal.Signals, trial: int, root: str, docs: str, keys: list, args) -> dict:
    """One trial: start the leg, send ``sig`` to its process group (as Ctrl-C or a pod's end
    would) once a third of the calls are answered, run the same command again to the end, and
    count the calls the teacher answered twice."""
    from support.teacher import TeacherProcess, read_log, repeated_calls

    work = os.path.join(root, f"{sig.name}-{leg}-{trial}")
    os.makedirs(work)
    calls_log = os.path.join(work, "calls.log")
    teacher = TeacherProcess(latency=args.latency, p_429=0.03, p_500=0.01, retry_after=1, log=calls_log)
    with teacher, open(os.path.join(work, "leg.log"), "ab") as log:
        argv, env, out = leg_command(leg, work, docs, teacher.url, None, args)
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        while _answered(calls_log) < len(keys) // 3 and proc.poll() is None:
            time.sleep(0.02)  # a benchmark's trigger: the teacher's log, looked at every 20 ms
        with urllib.request.urlopen(f"http://127.0.0.1:{teacher.port}/stats", timeout=30) as response:
            in_flight = json.loads(response.read())["in_flight"]
        os.killpg(proc.pid, sig)
        first_exit = proc.wait(timeout=300)
        answered_at_stop = _answered(calls_log)
        second = subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=900)
    problem = f"resume exit {second.returncode} (see {work}/leg.log)" if second.returncode else None
    if problem is None:
        problem = _check_baseline(out, keys) if leg == "baseline" else _check_shardwright(out, keys)
    return {
        "leg": leg,
        "signal": sig.name,
        "trial": trial,
        "ok": problem is None,
        "problem": problem,
        "first_exit": first_exit,
        "in_flight_at_signal": in_flight,
        "answered_before_resume": answered_at_stop,
        "repeated_calls": repeated_calls(read_log(calls_log)),
    }


def report(results: list[dict]) -> None:
    columns = ["samples_per_s", "cpu_ms_per_sample", "peak_rss_mb", "peak_pss_mb", "calls", "repeated_calls"]
    columns += ["over_budget_calls", "peak_in_flight", "seconds"]
    print(f"{'scenario':<8} {'leg':<12} " + " ".join(f"{c:>17}" for c in columns))
    for r in results:
        if not r["ok"]:
            print(f"{r['scenario']:<8} {r['leg']:<12} FAILED: {r['problem']}")
            continue
        print(f"{r['scenario']:<8} {r['leg']:<12} " + " ".join(f"{r[c]:>17}" for c in columns))
    for scenario in dict.fromkeys(r["scenario"] for r in results):
        pair = {r["leg"]: r for r in results if r["scenario"] == scenario and r["ok"]}
        if len(pair) == 2:
            ratio = pair["shardwright"]["samples_per_s"] / pair["baseline"]["samples_per_s"]
            line = f"{scenario}: shardwright / baseline samples/s = {ratio:.2f}"
            if scenario == "budget":
                used = {leg: pair[leg]["accepted_per_s"] / BUDGET_RPS for leg in pair}
                line += (
                    f"; calls accepted per second from the first call to the last: shardwright {used['shardwright']:.0%}"
                    f", baseline {used['baseline']:.0%} of the {BUDGET_RPS}/s budget"
                )
            print(line)
    modes = {r["mode"] for r in results if r["leg"] == "shardwright"}
    print("shardwright ran as: " + "; ".join(sorted(modes)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=20, help="documents (14-23 pages each)")
    parser.add_argument("--scenarios", default="open,budget")
    parser.add_argument("--latency", type=float, default=0.3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--num-shards", type=int, default=None, help="shardwright's num_shards (default: its own)")
    parser.add_argument(
        "--durable-every", type=float, default=None, help="shardwright's durable_every (default: its own)"
    )
    parser.add_argument("--prefetch", type=int, default=3, help="pages whose calls start ahead, per document")
    parser.add_argument("--in-flight", type=int, default=32, help="shardwright: calls in flight per worker at most")
    parser.add_argument("--baseline-concurrency", type=int, default=64)
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, outputs)")
    parser.add_argument("--interrupt", help="SIGINT, SIGTERM or SIGKILL: interruption trials instead of throughput")
    parser.add_argument("--trials", type=int, default=3, help="with --interrupt: trials per leg")
    parser.add_argument("--leg", nargs=2, metavar=("DOCS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.leg:
        run_shardwright_leg(
            args.leg[0], args.leg[1], args.workers, args.concurrency, args.num_shards, args.durable_every
        )
        return 0
    root = tempfile.mkdtemp(prefix="bench-sdg-")
    try:
        docs = os.path.join(root, "docs")
        keys = make_documents(docs, args.docs)
        print(
            f"{args.docs} documents, {len(keys) // CALLS} pages, {len(keys)} calls; teacher latency {args.latency} s,"
        )
        print(f"3 % 429 (Retry-After 1 s), 1 % 500; cpus {os.cpu_count()}, load average {os.getloadavg()}")
        if args.interrupt:
            sig = signal.Signals[args.interrupt]
            trials = [
                run_interrupted(leg, sig, trial, root, docs, keys, args)
                for trial in range(args.trials)
                for leg in ("baseline", "shardwright")
            ]
            for t in trials:
                what = "ok" if t["ok"] else f"FAILED: {t['problem']}"
                print(
                    f"{t['signal']} {t['leg']:<12} trial {t['trial']}: {t['in_flight_at_signal']:>3} calls in flight at the "
                    f"signal, exit {t['first_exit']}, {t['repeated_calls']:>3} calls repeated on resume; output {what}"
                )
            print(f"load average after: {os.getloadavg()}; shardwright ran as: {_shardwright_mode(args)}")
            return 0 if all(t["ok"] for t in trials) else 1
        results = []
        for scenario in args.scenarios.split(","):
            for leg in ("baseline", "shardwright"):
                results.append(run_leg(leg, scenario, root, docs, keys, args))
                print(f"  {scenario}/{leg}: {results[-1]['samples_per_s']} samples/s", flush=True)
        print(f"load average after: {os.getloadavg()}")
        report(results)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"load_average": os.getloadavg(), "results": results}, f, indent=1)
        return 0 if all(r["ok"] for r in results) else 1
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
