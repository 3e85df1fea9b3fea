"""A synthetic-data pipeline for the jobs service (docs/jobs.md, "An SDG pipeline"):
for each document, for each page, call a teacher LLM (any OpenAI-compatible
``/chat/completions`` endpoint) ``samples_per_page`` times and keep one sample per call.

Serve it and submit a job::

    shardwright serve --pipelines sdg_pipelines --output-root /data/sdg     # from this directory
    curl -X POST localhost:8000/api/v1/jobs -H "Authorization: Bearer $TOKEN" -d '{
      "pipeline": "generate", "output_dir": "/data/sdg/run1",
      "inputs": [{"doc": "doc007.txt", "pages": ["page one text", "page two text"]}],
      "config": {"teacher_url": "http://127.0.0.1:8001/v1", "samples_per_page": 3}}'

The config is part of the run's identity: a job with another config over an interrupted run on
the same output is refused (409 ConfigChanged, naming the keys). A teacher's 429 or 5xx is a
transient system error: the service retries the job with backoff, resuming where it stopped.
"""

from __future__ import annotations

import httpx
from pydantic import BaseModel, Field


class SDGConfig(BaseModel):
    """How to ask the teacher (the job's config; GET /api/v1/pipelines shows its schema)."""

    teacher_url: str = Field(description="the teacher's OpenAI-compatible base URL, e.g. http://host:8001/v1")
    model: str = Field("teacher", description="the model name sent to the teacher")
    samples_per_page: int = Field(3, ge=1, le=64, description="teacher calls per page, one sample each")
    temperature: float = Field(0.7, ge=0.0, le=2.0, description="sampling temperature")
    max_tokens: int = Field(512, ge=1, le=32768, description="the longest answer per call")
    timeout_s: float = Field(60.0, gt=0, le=600, description="seconds per teacher call")
    prompt: str = Field(
        "Write one question a student could answer from this page, then its answer.\n\n{page}",
        description="the prompt; {page} is replaced by the page's text",
    )


def generate(document: dict, config: SDGConfig):
    """For each page of a document ({"doc": name, "pages": [text, ...]}), call the teacher
    samples_per_page times: one sample {"doc", "page", "k", "text"} per call."""
    with httpx.Client(base_url=config.teacher_url, timeout=config.timeout_s) as teacher:
        for page, text in enumerate(document["pages"]):
            for k in range(config.samples_per_page):
                r = teacher.post(
                    "/chat/completions",
                    json={
                        "model": config.model,
                        "messages": [{"role": "user", "content": config.prompt.format(page=text)}],
                        "temperature": config.temperature,
                        "max_tokens": config.max_tokens,
                    },
                )
                r.raise_for_status()  # a 429/5xx: a transient error the service retries
                answer = r.json()["choices"][0]["message"]["content"]
                yield {"doc": document["doc"], "page": page, "k": k, "text": answer}
