"""A loopback OpenAI-compatible teacher for I/O-bound fns (standard library only).

An asyncio HTTP/1.1 server that answers ``POST /v1/chat/completions`` in OpenAI's response
shape after ``latency`` seconds, keeps connections alive, and serves thousands of them on one
core. Faults are seeded per call: the n-th call of a key draws from ``(seed, key, n)``, so which
calls fail does not depend on arrival order, and a retry of a failed call draws afresh.

* ``p_429``  answer 429 at once, with ``Retry-After`` (and OpenAI's ``retry-after-ms``)
* ``p_500``  answer 500 after the latency (a server that failed mid-generation)
* ``hold_after``  answer that many calls, then hold every later one (it is in flight, unanswered)
             until :meth:`Teacher.release`: the client's run is certainly mid-way while a
             test looks at it or signals it, at any load (``stats.held`` counts the held calls)
* ``rps``    an optional budget: a token bucket of ``burst`` calls (default: one second's
             worth) refilled at ``rps``; a call over it is answered 429 and logged ``429b``

A call's key is the request's ``user`` field when it is a string (OpenAI's end-user id: the
benchmark puts ``doc/page/call`` there), else a digest of its messages. Every call is appended
to ``log`` as ``status key time`` (time.time()); :func:`read_log`, :func:`repeated_calls` and
:func:`over_budget_calls` count afterwards. ``GET /stats`` returns the counters as JSON.

In-thread::

    with Teacher(latency=0.3, p_429=0.03, log=path) as teacher:
        url = teacher.url  # http://127.0.0.1:PORT/v1

As a subprocess (prints the port on stdout; stop it by pid)::

    python tests/support/teacher.py --port 0 --latency 0.3 --p-429 0.03 --log calls.log
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error"}


@dataclass
class TeacherStats:
    calls: int = 0
    statuses: Counter = field(default_factory=Counter)
    in_flight: int = 0
    peak_in_flight: int = 0
    held: int = 0  # calls waiting on release() now


class Teacher:
    """The server; :meth:`start` runs it on its own thread (or call :meth:`serve` in a loop)."""

    def __init__(
        self,
        *,
        latency: float = 0.3,
        p_429: float = 0.0,
        p_500: float = 0.0,
        retry_after: float = 1.0,
        rps: float | None = None,
        burst: float | None = None,
        seed: int = 0,
        hold_after: int | None = None,
        log: str | None = None,
        reply_chars: int = 200,
        host: str = "127.0.0.1",
        port: int = 0,
    ):
        self.latency, self.p_429, self.p_500, self.retry_after = latency, p_429, p_500, retry_after
        self.rps = rps
        self.burst = burst if burst is not None else (max(1.0, rps) if rps else 0.0)
        self.seed, self.reply_chars = seed, reply_chars
        self.host, self.port = host, port
        self.stats = TeacherStats()
        self.hold_after = hold_after
        self._admitted = 0
        self._released: asyncio.Event | None = None
        self._seen: Counter = Counter()
        self._tokens = self.burst
        self._refilled = time.monotonic()
        self._log = open(log, "a", buffering=1) if log else None  # line-buffered: readable while running
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopped: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    # -- the decisions -------------------------------------------------------------------

    def _draw(self, key: str) -> float:
        n = self._seen[key]
        self._seen[key] += 1
        digest = hashlib.blake2b(f"{self.seed}\0{key}\0{n}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64

    def _over_budget(self) -> float:
        """0 when the call fits the budget (a token is taken), else the seconds until it would."""
        if not self.rps:
            return 0.0
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._refilled) * self.rps)
        self._refilled = now
        if self._tokens >= 1.0 - 1e-9:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self.rps

    async def _hold(self) -> None:
        """Past ``hold_after`` calls, wait for :meth:`release`."""
        self._admitted += 1
        if self.hold_after is None or self._admitted <= self.hold_after or self._released is None:
            return
        self.stats.held += 1
        try:
            await self._released.wait()
        finally:
            self.stats.held -= 1

    def release(self) -> None:
        """Answer the held calls and every later one (a no-op without ``hold_after``)."""
        if self._loop is not None and self._released is not None:
            self._loop.call_soon_threadsafe(self._released.set)

    def _record(self, status: str, key: str) -> None:
        self.stats.calls += 1
        self.stats.statuses[status] += 1
        if self._log is not None:
            self._log.write(f"{status} {key} {time.time():.6f}\n")

    async def _completion(self, body: bytes) -> tuple[int, dict, dict[str, str]]:
        try:
            request = json.loads(body)
            messages = request["messages"]
        except (ValueError, KeyError, TypeError):
            return 400, {"error": {"message": "body must be JSON with messages", "type": "invalid_request_error"}}, {}
        user = request.get("user")
        key = user if isinstance(user, str) and user and " " not in user else _digest(messages)
        wait = self._over_budget()
        if wait > 0:
            self._record("429b", key)
            return 429, _error("rate_limit_exceeded", "over the requests-per-second budget"), _retry_headers(wait)
        await self._hold()
        draw = self._draw(key)
        if draw < self.p_429:
            self._record("429", key)
            return 429, _error("rate_limit_exceeded", "rate limited"), _retry_headers(self.retry_after)
        await asyncio.sleep(self.latency)
        if draw < self.p_429 + self.p_500:
            self._record("500", key)
            return 500, {"error": {"message": "internal error", "type": "server_error"}}, {}
        self._record("200", key)
        text = (f"answer to {key}: " + "lorem ipsum " * (self.reply_chars // 12 + 1))[: self.reply_chars]
        return 200, _reply(request.get("model", "teacher"), key, text), {}

    # -- HTTP/1.1 ------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _version = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.stats.in_flight += 1
                self.stats.peak_in_flight = max(self.stats.peak_in_flight, self.stats.in_flight)
                try:
                    status, payload, extra = await self._route(method, path.split("?", 1)[0], body)
                finally:
                    self.stats.in_flight -= 1
                data = json.dumps(payload).encode()
                close = headers.get("connection", "").lower() == "close"
                out = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}", "Content-Type: application/json"]
                out += [f"Content-Length: {len(data)}", "Connection: close" if close else "Connection: keep-alive"]
                out += [f"{k}: {v}" for k, v in extra.items()]
                writer.write(("\r\n".join(out) + "\r\n\r\n").encode() + data)
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, ValueError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def _route(self, method: str, path: str, body: bytes) -> tuple[int, dict, dict[str, str]]:
        if method == "POST" and path == "/v1/chat/completions":
            return await self._completion(body)
        if method == "GET" and path == "/stats":
            stats = self.stats
            return (
                200,
                {
                    "calls": stats.calls,
                    "statuses": dict(stats.statuses),
                    "in_flight": stats.in_flight,
                    "peak_in_flight": stats.peak_in_flight,
                },
                {},
            )
        if method == "GET" and path in ("/health", "/v1/models"):
            return 200, {"object": "list", "data": [{"id": "teacher", "object": "model"}]}, {}
        return 404, {"error": {"message": f"no route {method} {path}", "type": "not_found"}}, {}

    # -- running -------------------------------------------------------------------------

    async def serve(self, ready: threading.Event | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        self._released = asyncio.Event()
        self._server = await asyncio.start_server(self._connection, self.host, self.port, backlog=4096)
        self.port = self._server.sockets[0].getsockname()[1]
        if ready is not None:
            ready.set()
        async with self._server:
            await self._stopped.wait()

    def start(self) -> Teacher:
        self._thread = threading.Thread(target=lambda: asyncio.run(self.serve(self._ready)), daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the teacher did not start within 30 s")
        return self

    def stop(self) -> None:
        self.release()  # a held call would keep its connection, and the server, open
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        if self._thread is not None:
            self._thread.join(30)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Teacher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _digest(value: object) -> str:
    return hashlib.blake2b(json.dumps(value, sort_keys=True).encode(), digest_size=8).hexdigest()


def _error(code: str, message: str) -> dict:
    return {"error": {"message": message, "type": "rate_limit_error", "code": code}}


def _retry_headers(seconds: float) -> dict[str, str]:
    return {"Retry-After": str(max(1, int(seconds + 0.999))), "retry-after-ms": str(max(1, int(seconds * 1000)))}


def _reply(model: str, key: str, text: str) -> dict:
    return {
        "id": f"chatcmpl-{_digest(key)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 16, "completion_tokens": len(text) // 4, "total_tokens": 16 + len(text) // 4},
    }


# -- the call log --------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    status: str  # "200", "429", "500", or "429b" (over the budget)
    key: str
    time: float


def read_log(path: str) -> list[Call]:
    calls = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3:  # a line cut by a kill is skipped
                calls.append(Call(parts[0], parts[1], float(parts[2])))
    return calls


def repeated_calls(calls: list[Call]) -> int:
    """Calls answered 200 for a key that had already been answered 200: work done twice (a retry
    after a 429/500 is not a repeat: that call's answer never reached the client)."""
    answered = Counter(c.key for c in calls if c.status == "200")
    return sum(n - 1 for n in answered.values())


def over_budget_calls(calls: list[Call]) -> int:
    """Calls the teacher refused as over its requests-per-second budget."""
    return sum(1 for c in calls if c.status == "429b")


def budget_replay(calls: list[Call], rps: float, burst: float | None = None) -> int:
    """How many of ``calls`` a token bucket of ``burst`` (default one second's worth) refilled at
    ``rps`` would have refused, replayed over the logged times: over-budget calls counted
    against a teacher that enforced no budget."""
    capacity = burst if burst is not None else max(1.0, rps)
    tokens, last, over = capacity, None, 0
    for call in sorted(calls, key=lambda c: c.time):
        if last is not None:
            tokens = min(capacity, tokens + (call.time - last) * rps)
        last = call.time
        if tokens >= 1.0 - 1e-9:  # float sums of exact spacings
            tokens -= 1.0
        else:
            over += 1
    return over


# -- as a subprocess -----------------------------------------------------------------------


class TeacherProcess:
    """The teacher in its own process: ``start()`` waits for its port, ``stop()`` ends it by pid."""

    def __init__(self, **options: object):
        self.options = options
        self.proc: subprocess.Popen | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> TeacherProcess:
        argv = [sys.executable, os.path.abspath(__file__)]
        for name, value in self.options.items():
            if value is not None:
                argv += [f"--{name.replace('_', '-')}", str(value)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # the port, once listening
        if not line.strip().isdigit():
            self.proc.kill()
            raise RuntimeError(f"the teacher did not start: {line!r}")
        self.port = int(line)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            self.proc.wait(30)

    def __enter__(self) -> TeacherProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a loopback OpenAI-compatible teacher")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.3)
    parser.add_argument("--p-429", type=float, default=0.0)
    parser.add_argument("--p-500", type=float, default=0.0)
    parser.add_argument("--retry-after", type=float, default=1.0)
    parser.add_argument("--rps", type=float, default=None)
    parser.add_argument("--burst", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log", default=None)
    parser.add_argument("--reply-chars", type=int, default=200)
    args = parser.parse_args(argv)
    options = {k: v for k, v in vars(args).items()}
    teacher = Teacher(**options)

    async def run() -> None:
        ready = threading.Event()
        task = asyncio.create_task(teacher.serve(ready))
        loop = asyncio.get_running_loop()
        while not ready.is_set() and not task.done():
            await asyncio.sleep(0.01)
        print(teacher.port, flush=True)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: teacher._stopped.set() if teacher._stopped else None)
        await task

    asyncio.run(run())
    if teacher._log is not None:
        teacher._log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
