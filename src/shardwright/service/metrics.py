"""``GET /metrics``: the jobs service in Prometheus's text format (the ``prometheus-client``
library, the ``telemetry`` extra).

Two kinds of series. Read from the job store at each scrape, so they survive a restart and
agree with the API: jobs by state; attempts by outcome and error kind, and by trigger (the
retries); inputs done, inputs total and items per live job (PENDING or RUNNING: a finished
job's series ends, which keeps the label set bounded) and summed over every job. Counted in
this process since it started (Prometheus handles the reset of a restart): API request
latency by route template, method and status, as a histogram.

What the runs of the jobs did inside their processes (store requests by verb and outcome,
retries by cause, 429s, chunks and bytes committed) is summed from the counter files each
attempt's processes keep (shardwright.tally): an ended attempt's are read once and kept.
Calls in flight and latencies stay in the run's own OpenTelemetry.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from ..tally import RunCounts
from .model import AttemptOutcome, JobState
from .store import JobRecord, JobStore

#: what an attempt's processes counted, by job id and attempt number
CountersOf = Callable[[str, int], RunCounts]

__all__ = ["CONTENT_TYPE", "ServiceMetrics", "metrics_available"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: jobs read per scrape (the newest first would need another index; the store lists by queue position)
MAX_JOBS_SCRAPED = 100_000
#: the methods a label names; any other is "other". HTTP lets a client invent methods, and each
#: one made a new histogram series before the token was checked: 300 unauthenticated requests
#: added 300 series (460 KB per scrape), without bound (trust round 7)
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def metrics_available() -> bool:
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return True


class ServiceMetrics:
    """One service's registry: the store collector and the request histogram."""

    def __init__(self, store: JobStore, counters_of: CountersOf | None = None):
        from prometheus_client import CollectorRegistry, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_StoreCollector(store, _RunCounters(counters_of) if counters_of else None))
        self.requests = Histogram(
            "shardwright_api_request_seconds",
            "Time to answer an API request, by route template, method and status",
            ["route", "method", "status"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        method = method if method in _METHODS else "other"
        self.requests.labels(route, method, str(status)).observe(seconds)

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class _RunCounters:
    """The run counters of every attempt in the store; an ended attempt's files no longer
    change, so they are read once (the cache holds one small record per ended attempt)."""

    def __init__(self, counters_of: CountersOf):
        self.counters_of = counters_of
        self.ended: dict[tuple[str, int], RunCounts] = {}

    def total(self, jobs: list[JobRecord]) -> RunCounts:
        total = RunCounts()
        for job in jobs:
            for attempt in job.attempts:
                key = (job.id, attempt.number)
                counts = self.ended.get(key)
                if counts is None:
                    counts = self.counters_of(job.id, attempt.number)
                    if attempt.outcome is not AttemptOutcome.RUNNING:
                        self.ended[key] = counts
                total = total.plus(counts)
        return total


class _StoreCollector:
    def __init__(self, store: JobStore, runs: _RunCounters | None):
        self.store, self.runs = store, runs

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        jobs = self.store.list(limit=MAX_JOBS_SCRAPED)
        states = Counter(job.state for job in jobs)
        by_state = GaugeMetricFamily("shardwright_jobs", "Jobs in the store, by state", labels=["state"])
        for state in JobState:
            by_state.add_metric([state.value], states.get(state, 0))
        yield by_state

        outcomes: Counter[tuple[str, str]] = Counter()
        triggers: Counter[str] = Counter()
        for job in jobs:
            for attempt in job.attempts:
                outcomes[(attempt.outcome.value, attempt.error.kind if attempt.error else "")] += 1
                triggers[attempt.trigger.value] += 1
        attempts = CounterMetricFamily(
            "shardwright_job_attempts",
            "Attempts of every job in the store, by outcome and error kind (user, system; empty: no error)",
            labels=["outcome", "error_kind"],
        )
        for (outcome, kind), n in sorted(outcomes.items()):
            attempts.add_metric([outcome, kind], n)
        yield attempts
        started = CounterMetricFamily(
            "shardwright_job_attempts_started",
            "Attempts by what started them (submit; retry, auto-retry, server-restart are the retries)",
            labels=["trigger"],
        )
        for trigger, n in sorted(triggers.items()):
            started.add_metric([trigger], n)
        yield started

        live = [job for job in jobs if not job.state.is_terminal()]
        for name, help_text, value in (
            ("shardwright_job_inputs_done", "Inputs done of a live job", lambda j: j.progress.inputs_done),
            ("shardwright_job_inputs_total", "Inputs of a live job", lambda j: j.progress.inputs_total),
            ("shardwright_job_items", "Items written by a live job", lambda j: j.progress.items),
        ):
            family = GaugeMetricFamily(name, help_text, labels=["job", "pipeline", "state"])
            for job in live:
                family.add_metric([job.id, job.pipeline, job.state.value], value(job))
            yield family
        items = CounterMetricFamily("shardwright_items", "Items written by every job in the store")
        items.add_metric([], sum(job.progress.items for job in jobs))
        yield items
        done = CounterMetricFamily("shardwright_inputs_done", "Inputs done by every job in the store")
        done.add_metric([], sum(job.progress.inputs_done for job in jobs))
        yield done
        if self.runs is not None:
            yield from _run_families(self.runs.total(jobs))


def _run_families(counts: RunCounts) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily

    requests = CounterMetricFamily(
        "shardwright_store_requests",
        "Object-store requests of every job's runs, by verb and outcome (ok, missing, or the failure kind)",
        labels=["verb", "outcome"],
    )
    for (verb, outcome), n in sorted(counts.store_requests.items()):
        requests.add_metric([verb, outcome], n)
    yield requests
    retries = CounterMetricFamily(
        "shardwright_run_retries",
        "Retries inside every job's runs, by cause (fn, store transient, ...)",
        labels=["cause"],
    )
    for cause, n in sorted(counts.retries.items()):
        retries.add_metric([cause], n)
    yield retries
    throttled = CounterMetricFamily("shardwright_store_throttled", "429s the stores answered, by verb", labels=["verb"])
    for verb, n in sorted(counts.throttled.items()):
        throttled.add_metric([verb], n)
    yield throttled
    for name, help_text, value in (
        ("shardwright_chunks_committed", "Chunks committed by every job's runs", counts.chunks_committed),
        ("shardwright_bytes_written", "Bytes of chunk files committed by every job's runs", counts.bytes_written),
    ):
        family = CounterMetricFamily(name, help_text)
        family.add_metric([], value)
        yield family


def route_template(request: Any, prefix: str) -> str:
    """The route's template (``/api/v1/jobs/{job_id}``), never the raw path: bounded labels.
    (A route of a router included under ``prefix`` knows only its own part of the path.)"""
    template = getattr(request.scope.get("route"), "path", None)
    if not template:
        return "unmatched"
    return template if template.startswith(prefix) else prefix + template


def clock() -> float:
    return time.perf_counter()
