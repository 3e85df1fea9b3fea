"""``shardwright serve``: load the pipelines, open the store, start the API on uvicorn."""

from __future__ import annotations

import os
import sys

DEFAULT_PORT = 8470
DEFAULT_DB = os.path.join("~", ".shardwright", "jobs.db")


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
    except OSError as exc:
        return str(exc)
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def lock_store(db_path: str):
    """Hold an exclusive lock on the store for the server's life (the kernel drops it when the
    process dies, even by SIGKILL): two servers on one store would run the same jobs twice."""
    import fcntl

    fd = os.open(db_path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        return None, holder
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd, None


def serve(
    module: str,
    db: str | None = None,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    max_running: int = 2,
    auto_retries: int = 2,
    output_roots=(),
    max_inputs: int = 100_000,
    max_body_bytes: int = 16 * 1024 * 1024,
    cancel_grace: float = 30.0,
    retry_backoff: float = 1.0,
) -> int:
    try:
        import uvicorn

        from .app import create_app
    except ImportError as exc:
        print(
            f"shardwright serve: error: {exc.name} is not installed; install the service extra: "
            "pip install 'shardwright[service]'",
            file=sys.stderr,
        )
        return 2
    from .auth import load_or_create_token
    from .pipelines import load_pipelines
    from .scheduler import Scheduler, ServiceConfig
    from .store import SqliteJobStore

    db_path = os.path.abspath(os.path.expanduser(db or DEFAULT_DB))
    os.makedirs(os.path.dirname(db_path), mode=0o700, exist_ok=True)
    problem = port_problem(host, port)
    if problem:
        print(
            f"shardwright serve: error: cannot listen on {host}:{port} ({problem}); choose another --port "
            "or stop what uses it",
            file=sys.stderr,
        )
        return 2
    lock, holder = lock_store(db_path)
    if lock is None:
        print(
            f"shardwright serve: error: another server (pid {holder}) uses the job store {db_path}; stop it first "
            "or give this one another --db",
            file=sys.stderr,
        )
        return 2
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # --pipelines MODULE from the current directory, like python -m
    pipelines = load_pipelines(module)
    try:
        token, token_source = load_or_create_token(os.path.join(os.path.dirname(db_path), "api-token"))
    except ValueError as exc:
        print(f"shardwright serve: error: {exc}", file=sys.stderr)
        return 2
    config = ServiceConfig(
        db_path=db_path,
        state_dir=os.path.splitext(db_path)[0] + "-files",
        module=module,
        module_path=module_root(sys.modules[module]),
        max_running=max_running,
        auto_retries=auto_retries,
        output_roots=tuple(output_roots or ()),
        max_inputs=max_inputs,
        max_body_bytes=max_body_bytes,
        cancel_grace=cancel_grace,
        retry_backoff=retry_backoff,
    )
    os.makedirs(config.state_dir, mode=0o700, exist_ok=True)
    store = SqliteJobStore(db_path)
    scheduler = Scheduler(store, config)
    app = create_app(config, pipelines, scheduler, token)
    print(f"shardwright serve: pipelines {', '.join(sorted(pipelines))} from {module}", file=sys.stderr)
    print(f"shardwright serve: job store {db_path}; {max_running} job(s) at a time", file=sys.stderr)
    print(f"shardwright serve: API token from {token_source}", file=sys.stderr)
    print(
        "shardwright serve: output roots: "
        + (", ".join(config.output_roots) if config.output_roots else "any (restrict them with --output-root)"),
        file=sys.stderr,
    )
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"shardwright serve: warning: listening on {host}: the token and credentials travel in clear "
            "unless a TLS proxy is in front",
            file=sys.stderr,
        )
    print(
        f"shardwright serve: http://{host}:{port}/ (dashboard), http://{host}:{port}/api/v1",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5)
    return 0
