"""The options of I/O-bound fns (issue 32) through the jobs API and ``shardwright jobs submit``:
concurrency, durable_every, stop_grace and retries (an int, or an object of RetryPolicy's JSON fields)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("fastapi")

from test_service_api import Service

IO_OPTIONS = {
    "concurrency": 8,
    "durable_every": 0.5,
    "stop_grace": 5.0,
    "retries": {"max_retries": 3, "max_delay": 2.0},
}


@pytest.fixture
def svc(tmp_path):
    return Service(tmp_path, output_roots=(str(tmp_path / "out"),), max_running=1, auto_retries=1)


def test_a_job_takes_the_options_of_io_bound_fns_and_runs_with_them(svc):
    job = svc.submit(options=IO_OPTIONS)
    assert job["options"].items() >= IO_OPTIONS.items(), job  # with the defaults the table gives (on_error, ...)
    svc.scheduler.tick()
    assert svc.job(job["id"])["options"].items() >= IO_OPTIONS.items()
    assert svc.submit(options={"retries": 0}, output_dir=str(svc.root / "out" / "b"))["options"]["retries"] == 0


@pytest.mark.parametrize(
    "options, field",
    [
        ({"concurrency": 0}, "options.concurrency"),
        ({"concurrency": 1025}, "options.concurrency"),
        ({"concurrency": "8"}, "options.concurrency"),
        ({"durable_every": 0.01}, "options.durable_every"),
        ({"stop_grace": -1}, "options.stop_grace"),
        ({"retries": "3"}, "options.retries"),
        ({"retries": {"transient": ["QuotaError"]}}, "options.retries"),
        ({"retries": {"max_retries": 3, "base_delay": 5.0, "max_delay": 1.0}}, "options"),  # the engine's rule
        ({"concurrency": 4, "timeout": 1.0}, "options"),  # a thread pool cannot take a SIGALRM timeout
    ],
)
def test_a_wrong_io_option_is_refused_at_submit_naming_it(svc, options, field):
    r = svc.http.post(
        "/api/v1/jobs",
        json={"pipeline": "square", "inputs": [1], "output_dir": str(svc.root / "out" / "x"), "options": options},
    )
    assert r.status_code == (422 if field != "options" else 400), r.text  # 400: the engine's own rule, a UsageError
    message = r.json()["error"]["message"]
    assert message.startswith(field) and "\n" not in message, message  # options.retries.<alternative>: ...
    assert os.listdir(svc.config.state_dir + "/jobs") == []


def test_jobs_submit_flags_of_io_bound_fns():
    from shardwright.cli.main import build_parser
    from shardwright.service.client import _options

    base = ["jobs", "submit", "echo", "--range", "3", "--output-dir", "/x"]
    args = build_parser().parse_args(
        [*base, "--concurrency", "8", "--durable-every", "0.5", "--stop-grace", "5", "--retries", '{"max_retries": 3}']
    )
    assert _options(args) == {"concurrency": 8, "durable_every": 0.5, "stop_grace": 5.0, "retries": {"max_retries": 3}}
    assert _options(build_parser().parse_args([*base, "--retries", "4"])) == {"retries": 4}
    with pytest.raises(SystemExit):
        build_parser().parse_args([*base, "--retries", "[3]"])
