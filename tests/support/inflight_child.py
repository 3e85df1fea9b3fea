"""A child process for the in-flight system tests: documents -> pages -> one teacher call per
page, through optimize(concurrency=) in one of three modes, killed by the tests with real signals.

argv: output dir, teacher URL, mode ("asyncgen", "async", "thread", "nopoints" or "limited"), concurrency,
durable_every, and optionally "edited": fn's code edited (the same stream), as a fix resumed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.error
import urllib.request

import shardwright
import shardwright.engine.limits

PAGES = 4
DOCS = 12


class TeacherError(Exception):
    """A teacher's error reply; its HTTP status makes it transient (429, 5xx) or not."""

    def __init__(self, status: int, headers: dict):
        super().__init__(f"teacher answered {status}")
        self.status_code = status
        self.headers = headers


def _body(key: str) -> bytes:
    return json.dumps({"model": "t", "user": key, "messages": [{"role": "user", "content": key}]}).encode()


def ask_sync(url: str, key: str) -> str:
    request = urllib.request.Request(f"{url}/chat/completions", _body(key), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())["choices"][0]["message"]["content"]
    except urllib.error.HTTPError as exc:
        raise TeacherError(exc.code, dict(exc.headers)) from None


_session: dict = {}


async def ask(url: str, key: str) -> str:
    import aiohttp

    loop = asyncio.get_running_loop()
    session = _session.get(loop)
    if session is None:
        session = _session[loop] = aiohttp.ClientSession()
    async with session.post(f"{url}/chat/completions", data=_body(key)) as response:
        if response.status != 200:
            raise TeacherError(response.status, dict(response.headers))
        return (await response.json())["choices"][0]["message"]["content"]


class Pages:
    """An async generator fn: one sample per page, a ResumePoint after each."""

    def __init__(self, url: str):
        self.url = url

    async def __call__(self, doc: int, resume=None):
        for page in range(resume["page"] if resume else 0, PAGES):
            answer = await ask(self.url, f"d{doc}/p{page}")
            yield {"doc": doc, "page": page, "answer": answer}
            yield shardwright.ResumePoint({"page": page + 1})


class OneCall:
    """An async def fn: one call, one sample."""

    def __init__(self, url: str):
        self.url = url

    async def __call__(self, doc: int):
        return {"doc": doc, "page": 0, "answer": await ask(self.url, f"d{doc}/p0")}


class PagesInThreads:
    """A plain generator fn, run in threads."""

    def __init__(self, url: str):
        self.url = url

    def __call__(self, doc: int, resume=None):
        for page in range(resume["page"] if resume else 0, PAGES):
            yield {"doc": doc, "page": page, "answer": ask_sync(self.url, f"d{doc}/p{page}")}
            yield shardwright.ResumePoint({"page": page + 1})


class PagesWithoutResumePoints:
    """An async generator fn that yields no ResumePoint: an interrupted document resumes by position."""

    def __init__(self, url: str):
        self.url = url

    async def __call__(self, doc: int):
        for page in range(PAGES):
            yield {"doc": doc, "page": page, "answer": await ask(self.url, f"d{doc}/p{page}")}


class PagesUnderLimiter(Pages):
    """Pages whose calls are made under a Limiter: ``shardwright status`` counts each input's calls in flight."""

    def __init__(self, url: str):
        super().__init__(url)
        self.limiter = shardwright.engine.limits.Limiter()  # no budget: it only counts the calls

    async def __call__(self, doc: int, resume=None):
        for page in range(resume["page"] if resume else 0, PAGES):
            async with self.limiter.slot():
                answer = await ask(self.url, f"d{doc}/p{page}")
            yield {"doc": doc, "page": page, "answer": answer}
            yield shardwright.ResumePoint({"page": page + 1})


async def _pages_edited(self, doc: int, resume=None):
    first = resume["page"] if resume else 0  # the same stream as Pages, its code edited
    for page in range(first, PAGES):
        answer = await ask(self.url, f"d{doc}/p{page}")
        yield {"doc": doc, "page": page, "answer": answer}
        yield shardwright.ResumePoint({"page": page + 1})


async def _without_points_edited(self, doc: int):
    pages = range(PAGES)  # the same stream as PagesWithoutResumePoints, its code edited
    for page in pages:
        yield {"doc": doc, "page": page, "answer": await ask(self.url, f"d{doc}/p{page}")}


MODES = {
    "asyncgen": Pages,
    "async": OneCall,
    "thread": PagesInThreads,
    "nopoints": PagesWithoutResumePoints,
    "limited": PagesUnderLimiter,
}
EDITED = {"asyncgen": _pages_edited, "nopoints": _without_points_edited}


def expected(mode: str) -> list[tuple[int, int]]:
    pages = 1 if mode == "async" else PAGES
    return [(doc, page) for doc in range(DOCS) for page in range(pages)]


if __name__ == "__main__":
    out, url, mode, concurrency, durable_every = sys.argv[1:6]
    if sys.argv[6:7] == ["edited"]:
        edited = EDITED[mode]
        edited.__qualname__ = f"{MODES[mode].__qualname__}.__call__"
        MODES[mode].__call__ = edited  # type: ignore[method-assign]
    shardwright.optimize(
        MODES[mode](url),
        list(range(DOCS)),
        out,
        num_workers=2,
        num_shards=4,  # 3 documents each: a worker holds two shards at once to keep 4 in flight
        concurrency=int(concurrency),
        durable_every=float(durable_every),
        chunk_size=1000,
        retries={"base_delay": 0.05, "max_delay": 0.2},
        verbose=False,
    )
