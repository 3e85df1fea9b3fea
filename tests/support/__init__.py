"""Test support, loaded by tests/conftest.py (fixtures through ``pytest_plugins``; the rest imported
as ``from support.helpers import ...``; ``tests/`` is on the path via setup.cfg's ``pythonpath``).

- ``helpers``: run a child optimize() (``crash_child``), signal it, watch processes, read datasets
  and commit records back (through shardwright's own protocol readers), kill loops.
- ``crash_child``: the child process of the crash tests (a script: ``python crash_child.py JSON``).
- ``s3server`` / ``s3_fixtures``: a real SeaweedFS S3 server on 127.0.0.1 and its fixtures;
  ``faultproxy``: an HTTP proxy injecting 503s, resets, truncations and latency.
- ``slurm_cluster`` / ``slurm_fixtures``: a real single-host Slurm cluster and its fixture;
  ``slurm_job``: the script each array task runs.
"""
