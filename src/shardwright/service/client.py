"""``shardwright jobs submit|list|show|cancel|retry|logs|delete``: the service's HTTP client.

The server's address comes from ``--url`` or ``SHARDWRIGHT_URL`` (default
http://127.0.0.1:8470); the token from ``SHARDWRIGHT_API_TOKEN`` or ``--token-file`` (default
~/.shardwright/api-token, where ``shardwright serve`` writes it), never from the command line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

from ..engine.options import JOB_OPTIONS, OptionSpec
from .storeplace import default_db

DEFAULT_URL = "http://127.0.0.1:8470"
DEFAULT_TOKEN_FILE = os.path.join(os.path.dirname(default_db()), "api-token")
OLD_TOKEN_FILE = os.path.join("~", ".shardwright", "api-token")  # where the first servers wrote it


class ClientError(Exception):
    pass


class JobsClient:
    def __init__(self, url: str, token: str, timeout: float = 30.0):
        self.url, self.token, self.timeout = url.rstrip("/"), token, timeout

    def request(self, method: str, path: str, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            f"{self.url}/api/v1{path}",
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                text = resp.read().decode()
                return json.loads(text) if text else None
        except urllib.error.HTTPError as exc:
            try:
                error = json.loads(exc.read().decode()).get("error", {})
                message = error.get("message") or exc.reason
            except ValueError:
                message = exc.reason
            raise ClientError(f"{exc.code}: {message}") from None
        except urllib.error.URLError as exc:
            raise ClientError(
                f"cannot reach {self.url} ({exc.reason}): is `shardwright serve` running? Set --url or SHARDWRIGHT_URL"
            ) from None


def _token(args) -> str:
    token = os.environ.get("SHARDWRIGHT_API_TOKEN")
    if token:
        return token
    path = os.path.expanduser(args.token_file or DEFAULT_TOKEN_FILE)
    if not args.token_file and not os.path.exists(path) and os.path.exists(os.path.expanduser(OLD_TOKEN_FILE)):
        path = os.path.expanduser(OLD_TOKEN_FILE)
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        raise ClientError(f"no API token: set SHARDWRIGHT_API_TOKEN or --token-file (no file {path})") from None


def _json_arg(text: str | None, name: str):
    if text is None:
        return None
    if text.startswith("@"):
        try:
            with open(text[1:]) as f:
                text = f.read()
        except OSError as exc:
            raise ClientError(f"{name} {text}: cannot read {text[1:]} ({exc.strerror or exc})") from None
        except UnicodeDecodeError:
            raise ClientError(f"{name} {text}: {text[1:]} is not a text (JSON) file") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ClientError(f"{name} is not JSON ({exc}); e.g. {name} '{{\"key\": 1}}' or {name} @file.json") from None


def _line(job: dict) -> str:
    p = job["progress"]
    error = job.get("error")
    where = f" on input {error['input_index']}" if error and error.get("input_index") is not None else ""
    text = (
        f"{job['id']}  {job['state']:<9} {job['pipeline']:<16} {p['inputs_done']}/{p['inputs_total']} inputs "
        f"{p['items']} items  attempts {job['attempts']}  {job['output_dir']}"
    )
    speed, eta = job.get("items_per_second"), job.get("eta_seconds")
    if speed is not None:
        text += f"\n    {speed:.1f} items/s" + (f", about {round(eta)} s left" if eta is not None else "")
    if error:
        text += f"\n    {error['kind']} error: {error['type']}{where}: {error['message'].splitlines()[0]}"
    return text


def add_jobs_command(subparsers) -> None:
    p = subparsers.add_parser(
        "jobs", help="submit and follow jobs of a `shardwright serve` service", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--url", default=os.environ.get("SHARDWRIGHT_URL", DEFAULT_URL))
    p.add_argument("--token-file", help=f"file holding the API token (default {DEFAULT_TOKEN_FILE})")
    sub = p.add_subparsers(dest="jobs_command", required=True)
    s = sub.add_parser("submit", help="submit a job; prints its id")
    s.add_argument("pipeline")
    s.add_argument("--output-dir", required=True)
    inputs = s.add_mutually_exclusive_group(required=True)
    inputs.add_argument(
        "--inputs",
        help='JSON list of inputs, or a source such as {"source": "parquet", "url": "s3://b/raw/"} (or @file.json)',
    )
    inputs.add_argument("--range", type=int, metavar="N", help="inputs 0..N-1")
    s.add_argument("--config", help="JSON object: the pipeline's config (or @file.json)")
    s.add_argument("--options", help="JSON object of optimize() options, e.g. '{\"chunk_size\": 100}'")
    s.add_argument(
        "--storage-options",
        help="JSON object of storage options: boto3 client arguments for s3://, the SDKs' names for gs:// and az:// "
        "(or @file.json: keeps them out of your shell history)",
    )
    for spec in JOB_OPTIONS:  # every option a job may set, from the engine's table
        s.add_argument(f"--{spec.name.replace('_', '-')}", dest=f"opt_{spec.name}", **_option_argument(spec))
    s.add_argument("--slurm-array", type=int, metavar="N", help="run on Slurm as an N-task array")
    s.add_argument("--wait", action="store_true", help="wait until the job ends; exit 1 unless it SUCCEEDED")
    ls = sub.add_parser("list", help="list jobs")
    ls.add_argument("--state", help="PENDING, RUNNING, SUCCEEDED, FAILED or CANCELED")
    ls.add_argument("--json", action="store_true")
    for name, helptext in (
        ("show", "a job and its attempts"),
        ("cancel", "stop a job (committed work is kept)"),
        ("retry", "run a FAILED or CANCELED job again; it resumes"),
        ("logs", "a job's log"),
        ("delete", "forget a finished job (its data stays)"),
    ):
        c = sub.add_parser(name, help=helptext)
        c.add_argument("job_id")
        if name == "show":
            c.add_argument("--json", action="store_true")
        if name == "retry":
            c.add_argument("--storage-options", help="JSON object, when the job lost them (SecretsLost)")
    p.set_defaults(func=run_jobs_command)


def _option_argument(spec: OptionSpec) -> dict:
    """argparse settings of one row of the engine's JOB_OPTIONS (``jobs submit --chunk-size 100``)."""
    if spec.kind == "bool":
        return {"action": argparse.BooleanOptionalAction, "default": None, "help": spec.help}
    if spec.kind == "choice":
        return {"choices": spec.choices, "default": None, "help": spec.help}
    if spec.kind == "size":
        return {"type": lambda t: int(t) if t.isdigit() else t, "default": None, "metavar": "SIZE", "help": spec.help}
    if spec.kind == "retries":  # --retries 3, or --retries '{"max_retries": 3, "max_delay": 10}'
        return {"type": _retries_argument, "default": None, "metavar": "N|JSON", "help": spec.help}
    kind = int if spec.kind == "int" else float
    return {"type": kind, "default": None, "metavar": spec.kind.upper(), "help": spec.help}


def _retries_argument(text: str) -> int | dict:
    if text.isdigit():
        return int(text)
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f"an int (max_retries) or a JSON object, e.g. '{{\"max_retries\": 3}}'; got {text!r}"
        )
    return value


def _options(args) -> dict:
    options = _json_arg(args.options, "--options") or {}
    if not isinstance(options, dict):
        raise ClientError("--options must be a JSON object, e.g. '{\"chunk_size\": 100}'")
    for spec in JOB_OPTIONS:
        value = getattr(args, f"opt_{spec.name}", None)
        if value is not None:
            options[spec.name] = value
    return options


def _wait(client: JobsClient, job_id: str) -> dict:
    while True:
        job = client.request("GET", f"/jobs/{job_id}")
        if job["state"] in ("SUCCEEDED", "FAILED", "CANCELED"):
            return job
        time.sleep(0.5)


def run_jobs_command(args) -> int:
    try:
        client = JobsClient(args.url, _token(args))
        cmd = args.jobs_command
        if cmd == "submit":
            inputs = list(range(args.range)) if args.range is not None else _json_arg(args.inputs, "--inputs")
            body = {
                "pipeline": args.pipeline,
                "inputs": inputs,
                "output_dir": args.output_dir,
                "config": _json_arg(args.config, "--config") or {},
                "options": _options(args),
            }
            storage_options = _json_arg(args.storage_options, "--storage-options")
            if storage_options:
                body["storage_options"] = storage_options
            if args.slurm_array:
                body["executor"] = {"kind": "slurm", "array": args.slurm_array}
            job = client.request("POST", "/jobs", body)
            print(job["id"])
            if args.wait:
                job = _wait(client, job["id"])
                print(_line(job))
                return 0 if job["state"] == "SUCCEEDED" else 1
            return 0
        if cmd == "list":
            jobs = client.request("GET", "/jobs" + (f"?state={args.state}" if args.state else ""))["jobs"]
            if args.json:
                print(json.dumps(jobs, indent=1))
            else:
                for job in jobs:
                    print(_line(job))
            return 0
        if cmd == "show":
            job = client.request("GET", f"/jobs/{args.job_id}")
            if args.json:
                print(json.dumps(job, indent=1))
                return 0
            print(_line(job))
            for a in job["attempt_history"]:
                error = a.get("error")
                print(
                    f"  attempt {a['number']} ({a['trigger']}): {a['outcome']}, started {a['started_at']}"
                    + (f"; {error['kind']} error {error['type']}: {error['message'].splitlines()[0]}" if error else "")
                )
            return 0
        if cmd in ("cancel", "retry"):
            payload: dict | None = None
            if cmd == "retry" and args.storage_options:
                payload = {"storage_options": _json_arg(args.storage_options, "--storage-options")}
            job = client.request("POST", f"/jobs/{args.job_id}/{cmd}", payload)
            print(_line(job))
            return 0
        if cmd == "logs":
            sys.stdout.write(client.request("GET", f"/jobs/{args.job_id}/logs")["text"])
            return 0
        if cmd == "delete":
            client.request("DELETE", f"/jobs/{args.job_id}")
            print(f"deleted job {args.job_id} (its output is untouched)")
            return 0
        raise ClientError(f"unknown command {cmd}")
    except ClientError as exc:
        print(f"shardwright jobs: error: {exc}", file=sys.stderr)
        return 2
