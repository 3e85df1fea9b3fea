"""Cluster engines: Slurm job arrays (``slurm``), and the executors that run a call's shards on
a cluster (``ray``), registered with the engine's executor registry by name. Importing this
package registers them without importing their third-party packages."""

from ..engine.executors import Executor, register_executor


def _ray_executor() -> Executor:
    from .ray import RayExecutor, import_ray

    import_ray()  # ImportError now, with the install hint, rather than inside the run
    return RayExecutor()


register_executor("ray", _ray_executor, "pip install 'shardwright[ray]'")
