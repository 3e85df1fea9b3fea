"""Names mosaicml-streaming imports from torchvision.transforms.functional."""


def to_tensor(pic):
    raise RuntimeError("stand-in torchvision (benchmarks only): to_tensor is not available")
