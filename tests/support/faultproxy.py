"""A small HTTP-aware fault-injecting proxy for S3 tests (standard library only).

It sits between boto3 and the test S3 server and, per request, can:

* ``503``       answer ``503 SlowDown`` itself with a real S3 XML error body (server never sees it)
* ``429``       answer ``429 TooManyRequests`` the same way (throttling: only through ``next_faults``)
* ``reset``     reset the connection (TCP RST) before forwarding: the server never sees it
* ``reset_after`` forward, let the server apply the request, then reset instead of answering:
                the nastiest case, because the client cannot know the write happened
* ``truncate``  forward, then cut the response after N body bytes (random N by default) and close
* ``hang``      read the request and never answer (until ``hang_seconds`` or the proxy stops)
* ``corrupt_body`` flip one bit in the middle of the request body, then forward it (an upload
                damaged in flight: only forced through ``next_faults``)
* ``latency``   add a delay before every request

Probabilities (``p_503``, ``p_reset``, ``p_truncate``, ``p_hang``; ``p_reset`` is split evenly
between ``reset`` and ``reset_after``) apply to every request; ``next_faults`` is a queue of
fault names forced on the next requests. Everything can be changed at runtime: set attributes
or call :meth:`FaultProxy.configure` in-process, or write a JSON control file (re-read when it
changes) when the proxy runs as a subprocess::

    python tests/faultproxy.py --upstream 127.0.0.1:8333 --control /tmp/faults.json
    # prints the listening port on stdout; echo '{"p_503": 0.2}' > /tmp/faults.json

One request per connection: the proxy forces ``Connection: close`` both ways, so every request
is parsed and decided on its own. It only ever listens on loopback.
"""

from __future__ import annotations

import collections
import json
import os
import random
import socket
import struct
import sys
import threading
import urllib.parse

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}
FAULTS = ("503", "429", "reset", "reset_after", "truncate", "hang", "corrupt_body")


def _s3_error_body(code: str) -> bytes:
    return (
        b'<?xml version="1.0" encoding="UTF-8"?>\n'
        b"<Error><Code>" + code.encode() + b"</Code><Message>Please reduce your request rate.</Message>"
        b"<RequestId>faultproxy</RequestId><HostId>faultproxy</HostId></Error>"
    )


# the status lines and bodies of the faults the proxy answers itself, as S3 would
_REFUSALS = {
    "503": ("503 Slow Down", _s3_error_body("SlowDown")),
    "429": ("429 Too Many Requests", _s3_error_body("TooManyRequests")),
}


class _Closed(Exception):
    pass


def _recv_until(sock: socket.socket, buf: bytearray, marker: bytes, limit: int = 1 << 16) -> int:
    """Read into ``buf`` until ``marker`` is in it; return the index just after the marker."""
    while True:
        i = buf.find(marker)
        if i >= 0:
            return i + len(marker)
        if len(buf) > limit:
            raise _Closed("header too large")
        data = sock.recv(65536)
        if not data:
            raise _Closed("peer closed")
        buf += data


def _recv_exact(sock: socket.socket, buf: bytearray, n: int) -> None:
    while len(buf) < n:
        data = sock.recv(min(1 << 20, max(65536, n - len(buf))))
        if not data:
            raise _Closed("peer closed mid-body")
        buf += data


def _parse_head(head: bytes) -> tuple[str, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    first = lines[0]
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, _, value = line.partition(":")
        headers.append((name.strip(), value.strip()))
    return first, headers


def _header(headers, name: str) -> str | None:
    name = name.lower()
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


def _build_head(first: str, headers) -> bytes:
    return ("\r\n".join([first] + [f"{k}: {v}" for k, v in headers]) + "\r\n\r\n").encode("latin-1")


def _reset(sock: socket.socket) -> None:
    """Close with a TCP RST (SO_LINGER 0) instead of a clean FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class FaultProxy:
    """A threaded loopback proxy in front of ``upstream`` that injects faults on demand."""

    def __init__(
        self,
        upstream: str | tuple[str, int],
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        seed: int | None = None,
        control_file: str | None = None,
    ):
        if isinstance(upstream, str):
            host, _, port = upstream.replace("http://", "").rstrip("/").rpartition(":")
            upstream = (host, int(port))
        if listen_host not in LOOPBACK_HOSTS and not listen_host.startswith("127."):
            raise ValueError(f"FaultProxy only listens on loopback, not {listen_host!r}")
        self.upstream = upstream
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.control_file = control_file
        self._control_mtime = None
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._active: set[socket.socket] = set()
        self.stats: collections.Counter = collections.Counter()
        # (method, path, fault or None) of every request, in order: see :meth:`failed`
        self.log: list[tuple[str, str, str | None]] = []
        self.clear()

    # -- configuration --------------------------------------------------------------------

    # ``stats`` counts: ``requests`` (and ``requests METHOD``) every request seen; ``FAULT`` and
    # ``FAULT METHOD`` the faults injected; ``upstream METHOD`` the requests sent on to the server
    # (so what it applied: a ``reset_after`` is sent, its answer withheld); ``forwarded`` the
    # answers relayed whole.

    def clear(self) -> None:
        """No faults (plain forwarding)."""
        with self._lock:
            self.p_503 = 0.0
            self.p_reset = 0.0
            self.p_truncate = 0.0
            self.p_hang = 0.0
            self.latency = 0.0  # seconds added to every request
            self.latency_jitter = 0.0  # plus uniform(0, jitter)
            self.truncate_after = None  # body bytes delivered before the cut; None = random
            self.hang_seconds = 3600.0
            self.methods = None  # e.g. {"GET"}: only these methods get faults
            self.next_faults = []  # forced faults for the next matching requests

    def configure(self, **settings) -> FaultProxy:
        """Set fault settings (same names as the attributes), e.g. ``configure(p_503=0.2)``."""
        with self._lock:
            for k, v in settings.items():
                if k not in (
                    "p_503",
                    "p_reset",
                    "p_truncate",
                    "p_hang",
                    "latency",
                    "latency_jitter",
                    "truncate_after",
                    "hang_seconds",
                    "methods",
                    "next_faults",
                ):
                    raise ValueError(f"unknown fault setting {k!r}")
                if k == "next_faults":
                    bad = [f for f in v if f not in FAULTS]
                    if bad:
                        raise ValueError(f"unknown faults {bad}: use {FAULTS}")
                    v = list(v)
                if k == "methods" and v is not None:
                    v = {m.upper() for m in v}
                setattr(self, k, v)
        return self

    def _reload_control(self) -> None:
        if not self.control_file:
            return
        try:
            mtime = os.stat(self.control_file).st_mtime_ns
        except FileNotFoundError:
            return
        if mtime == self._control_mtime:
            return
        try:
            with open(self.control_file) as f:
                settings = json.load(f)
        except (OSError, ValueError):
            return  # half-written: try again on the next request
        self._control_mtime = mtime
        self.clear()
        self.configure(**settings)

    def failed(self, fault: str, method: str, path: str = "") -> int:
        """How many ``method`` requests got ``fault``, counting only those whose path (without
        the query) ends with ``path``: one object's requests, not those of other clients or
        threads of the process that go through the same proxy."""
        with self._lock:
            return sum(1 for m, p, f in self.log if f == fault and m == method and p.endswith(path))

    def _choose(self, method: str, target: str = "") -> str | None:
        self._reload_control()
        with self._lock:
            self.stats["requests"] += 1
            self.stats[f"requests {method}"] += 1
            fault = self._decide(method)
            self.log.append((method, target.split("?", 1)[0], fault))
            return fault

    def _decide(self, method: str) -> str | None:
        """The fault for this request (under the lock)."""
        if self.methods is not None and method not in self.methods:
            return None
        if self.next_faults:
            return self.next_faults.pop(0)
        r = self._rng.random()
        for name, p in (
            ("503", self.p_503),
            ("reset", self.p_reset),
            ("truncate", self.p_truncate),
            ("hang", self.p_hang),
        ):
            if r < p:
                if name == "reset" and self._rng.random() < 0.5:
                    return "reset_after"
                return name
            r -= p
        return None

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._sock.getsockname()[1]

    @property
    def endpoint(self) -> str:
        return f"http://{self.listen_host}:{self.port}"

    def start(self) -> FaultProxy:
        self._sock = socket.socket(socket.AF_INET6 if ":" in self.listen_host else socket.AF_INET)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((self.listen_host, self.listen_port))
        self._sock.listen(256)
        self._sock.settimeout(0.2)
        self._thread = threading.Thread(target=self._accept_loop, name="faultproxy-accept", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._sock is not None:
            self._sock.close()
        with self._lock:
            active = list(self._active)
        for s in active:
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), name="faultproxy-conn", daemon=True).start()

    # -- one request ----------------------------------------------------------------------

    def _handle(self, client: socket.socket) -> None:
        upstream = None
        with self._lock:
            self._active.add(client)
        try:
            client.settimeout(120)
            buf = bytearray()
            end = _recv_until(client, buf, b"\r\n\r\n")
            first, headers = _parse_head(bytes(buf[:end]))
            body = bytearray(buf[end:])
            method = first.split(" ", 1)[0].upper()
            if (_header(headers, "Expect") or "").lower() == "100-continue":
                # Answer the 100 ourselves: we need the whole body before deciding anything.
                client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                headers = [(k, v) for k, v in headers if k.lower() != "expect"]
            te = (_header(headers, "Transfer-Encoding") or "").lower()
            if "chunked" in te:
                self._read_chunked(client, body)
            else:
                _recv_exact(client, body, int(_header(headers, "Content-Length") or 0))

            target = first.split(" ", 2)[1] if first.count(" ") >= 2 else ""
            fault = self._choose(method, urllib.parse.unquote(target))
            delay = self.latency + (self._rng.uniform(0, self.latency_jitter) if self.latency_jitter else 0)
            if delay:
                self._stop.wait(delay)
            if fault:
                with self._lock:
                    self.stats[fault] += 1
                    self.stats[f"{fault} {method}"] += 1
            if fault in _REFUSALS:
                status, error = _REFUSALS[fault]
                client.sendall(
                    _build_head(
                        f"HTTP/1.1 {status}",
                        [
                            ("Content-Type", "application/xml"),
                            ("Content-Length", str(len(error))),
                            ("Connection", "close"),
                            ("x-amz-request-id", "faultproxy"),
                        ],
                    )
                    + error
                )
                return
            if fault == "reset":
                _reset(client)
                return
            if fault == "hang":
                self._stop.wait(self.hang_seconds)
                return

            if fault == "corrupt_body" and len(body) > 64:
                body[len(body) // 2] ^= 0x01  # one bit flipped in flight, in the middle of the payload

            headers = [(k, v) for k, v in headers if k.lower() not in ("connection", "keep-alive")]
            headers.append(("Connection", "close"))
            upstream = socket.create_connection(self.upstream, timeout=120)
            upstream.sendall(_build_head(first, headers) + bytes(body))
            with self._lock:
                self.stats[f"upstream {method}"] += 1  # what the S3 server was sent

            rbuf = bytearray()
            rend = _recv_until(upstream, rbuf, b"\r\n\r\n")
            rfirst, rheaders = _parse_head(bytes(rbuf[:rend]))
            rheaders = [(k, v) for k, v in rheaders if k.lower() not in ("connection", "keep-alive")]
            rheaders.append(("Connection", "close"))
            rhead = _build_head(rfirst, rheaders)
            rest = bytes(rbuf[rend:])

            if fault == "reset_after":
                # The server has applied the request; the client never learns it.
                _reset(client)
                return
            if fault == "truncate":
                length = _header(rheaders, "Content-Length")
                if method == "HEAD" or length in (None, "0"):
                    cut = self._rng.randint(1, len(rhead) - 1)
                    client.sendall(rhead[:cut])  # cut inside the status/headers
                    return
                length = int(length)
                limit = self.truncate_after if self.truncate_after is not None else self._rng.randint(0, length - 1)
                client.sendall(rhead)
                self._relay(upstream, client, rest, min(limit, length - 1))
                return
            client.sendall(rhead)
            self._relay(upstream, client, rest, None)
            with self._lock:
                self.stats["forwarded"] += 1
        except (_Closed, OSError):
            pass
        finally:
            with self._lock:
                self._active.discard(client)
            for s in (client, upstream):
                if s is not None:
                    try:
                        s.close()
                    except OSError:
                        pass

    @staticmethod
    def _read_chunked(sock: socket.socket, body: bytearray) -> None:
        """Read a chunked body into ``body`` (kept raw, it is forwarded as is)."""
        pos = 0
        while True:
            end = _recv_until_from(sock, body, b"\r\n", pos)
            size = int(bytes(body[pos : end - 2]).split(b";")[0].strip() or b"0", 16)
            pos = end
            if size == 0:
                # trailers until an empty line
                while True:
                    end = _recv_until_from(sock, body, b"\r\n", pos)
                    line_empty = end - pos == 2
                    pos = end
                    if line_empty:
                        return
            _recv_exact(sock, body, pos + size + 2)
            pos += size + 2

    @staticmethod
    def _relay(upstream: socket.socket, client: socket.socket, first: bytes, limit: int | None) -> None:
        """Copy the response body to the client until EOF, or only ``limit`` bytes then close."""
        sent = 0
        data = first
        while True:
            if data:
                if limit is not None and sent + len(data) >= limit:
                    client.sendall(data[: limit - sent])
                    return
                client.sendall(data)
                sent += len(data)
            data = upstream.recv(1 << 20)
            if not data:
                return


def _recv_until_from(sock: socket.socket, buf: bytearray, marker: bytes, start: int) -> int:
    while True:
        i = buf.find(marker, start)
        if i >= 0:
            return i + len(marker)
        data = sock.recv(65536)
        if not data:
            raise _Closed("peer closed")
        buf += data


def _main(argv: list[str]) -> int:
    import argparse
    import signal

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream", required=True, help="HOST:PORT of the S3 server")
    ap.add_argument("--port", type=int, default=0, help="listening port (0 = any free one)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--control", help="JSON file with fault settings, re-read when it changes")
    ap.add_argument("--seed", type=int)
    args = ap.parse_args(argv)
    proxy = FaultProxy(
        args.upstream, listen_host=args.host, listen_port=args.port, seed=args.seed, control_file=args.control
    ).start()
    print(proxy.port, flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
