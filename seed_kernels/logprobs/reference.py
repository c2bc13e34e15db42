"""float64 reference for the logprobs seed (sanity check, not the parity target)."""

import torch


def reference(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits.double(), dim=-1)
    return logp.gather(1, targets.view(-1, 1)).view(-1)
