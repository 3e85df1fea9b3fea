import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from conftest_s3 import *  # noqa: E402,F401,F403  (s3_server, s3_bucket, s3_url, fault_proxy, ...)
from conftest_slurm import *  # noqa: E402,F401,F403  (slurm_cluster)
