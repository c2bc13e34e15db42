"""What values a case's float inputs hold: its *regime*, applied to standard-normal draws.

* ``normal``: ``randn`` (|x| below about 6);
* ``zero``: signed zeros (negative draws become -0.0);
* ``large``: ``randn`` times :data:`LARGE_SCALE` (near the top of the exponent range);
* ``special``: ``randn`` with a few NaN, +-inf, -0.0, subnormals and the largest finite;
* ``spread``: each row scaled by its own power of ten and each element by another, so
  rows' RMS run from about 0.01 to 10**4 (10**3 in float16) and elements within a row
  over two more decades: the activations between ``normal`` and ``large`` that real
  models hold (an RMS of 8 to 1000) and that neither of those draws.  The rows' decades
  are stratified (row i of n in the i-th n-th of the range, shuffled), so that a case of
  a few rows already has rows in every band about a decade wide.

Only batched inputs (and tokens and caches in the sequences layout) take a regime.
"""

from __future__ import annotations

REGIMES = ("normal", "zero", "large", "special", "spread")
# Scale of the "large" regime per dtype: big enough to exercise the exponent
# range, small enough that x*x summed over a row stays finite in fp32.
LARGE_SCALE = {"float32": 1e15, "bfloat16": 1e15, "float16": 1e4}
SPECIAL_FRACTION = 0.03
# The "spread" regime's decades: each row 10**u, u uniform in [low, high]; each element 10**v, |v| <= 1.
SPREAD_ROWS = {"float32": (-2.0, 4.0), "bfloat16": (-2.0, 4.0), "float16": (-2.0, 3.0)}


def apply_regime(base, regime: str, dtype_name: str, gen):
    """``base`` (float32 draws, rows along the first dimension) in ``regime``, still float32."""
    import torch

    if regime == "zero":
        return base * 0.0  # keeps the sign: negative draws become -0.0
    if regime == "large":
        return base * LARGE_SCALE[dtype_name]
    if regime == "spread" and base.dim() > 0 and base.numel():
        low, high = SPREAD_ROWS[dtype_name]
        n = base.shape[0]
        on = gen.device  # the generator's device: the CPU's, or the device's own (timed inputs)
        strata = (torch.randperm(n, generator=gen, device=on) + torch.rand(n, generator=gen, device=on)) / n
        rows = (low + (high - low) * strata).reshape((n,) + (1,) * (base.dim() - 1))
        elements = 2.0 * torch.rand(base.shape, generator=gen, device=on) - 1.0
        return base * torch.pow(10.0, rows + elements)
    return base


def inject_special(t, gen):
    """Replace a few entries by NaN, +-inf, -0.0, subnormals and the largest finite."""
    import torch

    info = torch.finfo(t.dtype)
    specials = torch.tensor(
        [float("nan"), float("inf"), float("-inf"), -0.0, info.smallest_normal / 4,
         -info.smallest_normal / 2, info.max, -info.max],
        dtype=t.dtype, device=t.device,
    )
    flat = t.reshape(-1).clone()
    count = max(1, int(flat.numel() * SPECIAL_FRACTION))
    # Distinct positions: index_put with duplicate indices has no defined winner.
    where = torch.randperm(flat.numel(), generator=gen, device=gen.device)[:count]
    which = torch.randint(0, len(specials), (count,), generator=gen, device=gen.device)
    flat[where] = specials[which]
    return flat.view(t.shape)
