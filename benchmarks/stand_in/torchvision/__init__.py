"""A stand-in for torchvision, for benchmarks/bench_read.py only.

mosaicml-streaming imports torchvision when it is imported (for its vision datasets, which the
benchmark does not use), and the torchvision that pip brings fails to import against the CPU
build of torch. bench_read.py puts this directory first on sys.path so that import succeeds.
"""
