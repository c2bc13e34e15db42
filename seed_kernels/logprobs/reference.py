"""float64 reference for the logprobs seed (sanity check, not the parity target)."""

import torch


def reference(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits.double(), dim=-1)
    inside = (targets >= 0) & (targets < logits.shape[-1])
    picked = logp.gather(1, torch.where(inside, targets, 0).reshape(-1, 1)).reshape(-1)
    # A target outside [0, V) (the ignore index -100 of padded positions) has the seed's result: NaN.
    return torch.where(inside, picked, float("nan"))
