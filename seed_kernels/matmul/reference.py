"""float64 reference for the matmul seed (sanity check, not the parity target)."""

import torch


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.double() @ b.double()
