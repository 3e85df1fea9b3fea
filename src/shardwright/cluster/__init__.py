"""Running one optimize() over several machines with Slurm: sbatch scripts and submission."""
