import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """ReLU 'without an extra allocation': the input is overwritten in place."""

    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.clamp_(min=0.0)
        return x
