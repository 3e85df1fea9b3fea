"""Names mosaicml-streaming imports from torchvision.datasets (unused by the benchmark)."""


class VisionDataset:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("stand-in torchvision (benchmarks only): VisionDataset is not available")


class CIFAR10(VisionDataset):
    pass
