"""The on-policy check: a sampler and a trainer compute the same tokens' log-probs.

A small decoder (:mod:`.model`) runs twice over the same tokens: as a serving
engine does (:mod:`.sampler`: paged KV cache, token-by-token decode, chunked
prefill, sequences joining and leaving the batch) and as a trainer does
(:mod:`.trainer`: packed full sequences in one batch, with a backward pass).
:mod:`.report` compares the two per token.  With batch-invariant kernels
(:mod:`.kernels`) the importance ratio is exactly 1.0 for every token.
:mod:`.sources` says what certifies each kernel file, and :mod:`.reach` runs
the files at the hidden sizes a real model has, which the small decoder
never reaches.

With ``--hf`` the model is a transformers causal LM instead (:mod:`.hf`:
from a config or a checkpoint, with left-padded prompts), sampled with
``generate()`` and trained with one padded step (:mod:`.hf_check`); the
kernels reach it through the wheels' own drop-ins, rendered for the chosen
kernel files (:mod:`.dropins`), and :mod:`.census` counts which of its ops
reached a kernel and which ran on torch.
"""
