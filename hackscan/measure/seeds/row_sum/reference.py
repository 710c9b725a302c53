import torch
import torch.nn as nn


class Model(nn.Module):
    """Sum over the last dimension of a 2-D input."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=1)


batch_size = 64
dim = 4093


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
