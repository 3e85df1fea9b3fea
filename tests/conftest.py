# Fixtures live in tests/support/ (s3_server, s3_bucket, s3_url, s3_storage_options, fault_proxy,
# slurm_cluster); tests/ is on sys.path through setup.cfg's ``pythonpath = tests``.
pytest_plugins = ("support.s3_fixtures", "support.slurm_fixtures")
