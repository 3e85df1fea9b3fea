"""The jobs service: ``shardwright serve`` (a REST API, a job queue and a dashboard) and
``shardwright jobs`` (its command-line client). See docs/jobs.md.

Needs the ``service`` extra (fastapi, uvicorn, pydantic, httpx); importing this package
does not import them, so the rest of the ``shardwright`` command works without it.
"""
