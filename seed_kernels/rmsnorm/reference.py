"""float64 reference for the rmsnorm seed (sanity check, not the parity target)."""

import torch


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + eps) * weight.double()
