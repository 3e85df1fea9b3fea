"""The HTTP API: dependencies (deps.py), the error shape and request limits (problems.py), and
one router per resource (routes/), as in the full-stack FastAPI template."""
