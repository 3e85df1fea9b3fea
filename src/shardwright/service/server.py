"""``shardwright serve``: load the pipelines, open the store, start the API on uvicorn."""

from __future__ import annotations

import logging
import os
import sys

from ..errors import UsageError
from .storeplace import default_db

DEFAULT_PORT = 8470
DEFAULT_DB = default_db()


def module_root(module) -> str | None:
    """The directory to put on sys.path so job processes can import ``module`` too."""
    path = getattr(module, "__file__", None)
    if not path:
        return None
    path = os.path.dirname(os.path.abspath(path))
    depth = module.__name__.count(".") + (1 if os.path.basename(module.__file__) == "__init__.py" else 0)
    for _ in range(depth):
        path = os.path.dirname(path)
    return path


def port_problem(host: str, port: int) -> str | None:
    """Why uvicorn could not bind (checked before any job starts), or None."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, OverflowError) as exc:
        return str(exc)
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


class StoreLock:
    """An exclusive lock on the store for the server's life (the kernel drops it when the process
    dies, even by SIGKILL): two servers on one store would run the same jobs twice."""

    def __init__(self, db_path: str):
        import fcntl

        os.makedirs(os.path.dirname(db_path), mode=0o700, exist_ok=True)
        self.fd = os.open(db_path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(self.fd)
            raise UsageError(
                f"another server (pid {holder}) uses the job store {db_path}; stop it first "
                "or give this one another --db"
            ) from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, str(os.getpid()).encode(), 0)

    def release(self) -> None:
        os.close(self.fd)


def _setup_logging() -> None:
    """The service's messages (logging.getLogger("shardwright.service")) as "shardwright serve: ..." lines."""
    logger = logging.getLogger("shardwright.service")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("shardwright serve: %(levelname)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)
        logger.propagate = False


def _say(message: str) -> None:
    print(f"shardwright serve: {message}", file=sys.stderr, flush=True)


def _open_store(given_db: str | None):
    """(db path, notice, lock, store), or UsageError naming what is wrong with --db."""
    import sqlite3

    from .store import SqliteJobStore
    from .storeplace import choose_db

    try:
        db_path, notice, lock = choose_db(given_db, StoreLock)
        store = SqliteJobStore(db_path)
    except (OSError, sqlite3.Error) as exc:
        where = given_db or "the default job store"
        raise UsageError(
            f"--db {where}: cannot use it ({getattr(exc, 'strerror', None) or exc}); give a --db in a directory you can write"
        ) from None
    return db_path, notice, lock, store


def serve(
    module: str,
    db: str | None = None,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    max_running: int = 2,
    auto_retries: int = 2,
    output_roots=(),
    input_roots=(),
    max_inputs: int = 100_000,
    max_queued: int = 1000,
    max_body_bytes: int = 16 * 1024 * 1024,
    cancel_grace: float = 30.0,
    retry_backoff: float = 1.0,
    ray_address: str | None = None,
    metrics_public: bool = False,
) -> int:
    try:
        import uvicorn

        from .app import create_app
        from .connections import HeadTimedProtocol
    except ImportError as exc:
        _say(f"error: {exc.name} is not installed; install the service extra: pip install 'shardwright[service]'")
        return 2
    from .auth import load_or_create_token
    from .pipelines import load_pipelines, parse_spec
    from .scheduler import Scheduler, ServiceConfig

    _setup_logging()
    if not 1 <= port <= 65535:
        _say(f"error: --port {port} is not a TCP port; choose one from 1 to 65535")
        return 2
    problem = port_problem(host, port)
    if problem:
        _say(f"error: cannot listen on {host}:{port} ({problem}); choose another --port or stop what uses it")
        return 2
    try:
        db_path, notice, _lock, store = _open_store(db)
        module_name, names = parse_spec(module)
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # --pipelines MODULE from the current directory, like python -m
        pipelines = load_pipelines(module_name, names)
        token, token_source = load_or_create_token(os.path.join(os.path.dirname(db_path), "api-token"))
    except ValueError as exc:  # UsageError too
        _say(f"error: {exc}")
        return 2
    if notice:
        _say(notice)
    config = ServiceConfig(
        db_path=db_path,
        state_dir=os.path.splitext(db_path)[0] + "-files",
        module=module_name,
        module_path=module_root(sys.modules[module_name]),
        max_running=max_running,
        auto_retries=auto_retries,
        output_roots=tuple(output_roots or ()),
        input_roots=tuple(input_roots or ()),
        max_inputs=max_inputs,
        max_queued=max_queued,
        max_body_bytes=max_body_bytes,
        cancel_grace=cancel_grace,
        retry_backoff=retry_backoff,
        pipeline_names=names,
        ray_address=ray_address,
        metrics_public=metrics_public,
    )
    os.makedirs(config.state_dir, mode=0o700, exist_ok=True)
    scheduler = Scheduler(store, config)
    app = create_app(config, pipelines, scheduler, token)
    _say(f"pipelines {', '.join(sorted(pipelines))} from {module_name}")
    _say(f"job store {db_path}; {max_running} job(s) at a time")
    _say(f"API token from {token_source}")
    _say(
        "output roots: "
        + (
            ", ".join(config.output_roots)
            if config.output_roots
            else "any except system and home directories and the service's own (restrict them with --output-root)"
        )
    )
    if ray_address:
        _say(f'Ray jobs ({{"kind": "ray"}}) run on the Ray cluster at {ray_address}')
    if host not in ("127.0.0.1", "localhost", "::1"):
        _say(f"warning: listening on {host}: the token and credentials travel in clear unless a TLS proxy is in front")
    _say(f"http://{host}:{port}/ (dashboard), http://{host}:{port}/api/v1")
    if app.state.metrics is None:
        _say("metrics: GET /metrics needs prometheus-client: pip install 'shardwright[telemetry]'")
    else:
        _say(f"metrics: http://{host}:{port}/metrics ({'no token' if metrics_public else 'bearer token required'})")
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5, http=HeadTimedProtocol)
    return 0
