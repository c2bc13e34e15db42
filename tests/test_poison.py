"""Poisoned allocations (:mod:`tik_agent.sandbox.poison`): every allocator a launcher may
call hands out the pattern during a judged call, whichever way the launcher reached it."""

import torch

from tik_agent.sandbox import launches
from tik_agent.sandbox.harness import guarded_call, load_kernel
from tik_agent.sandbox.poison import POISON, poisoned_allocations

# A launcher that took torch's allocators when its module loaded, as the static rules allow,
# and writes nothing of its output.
ALIASED = '''
import torch
from torch import empty_like

EMPTY_LIKE = torch.empty_like
NEW_EMPTY = torch.Tensor.new_empty


def rms_norm(x, weight, eps):
    return EMPTY_LIKE(x), empty_like(x), NEW_EMPTY(x, x.shape)
'''


def _all_poison(t, which) -> bool:
    return bool((t.view(torch.int32) == POISON[4][which]).all())


def test_every_allocator_that_hands_out_unwritten_memory_is_poisoned_during_a_judged_call():
    """Red team: Tensor.new_empty_strided (allowed by the static rules) was not poisoned,
    so an output allocated with it held whatever the allocator reused; in the graph
    stand-in that can be the seed's output on the same inputs, freed a moment before."""
    base = torch.ones(4)
    for which in (0, 1):
        with poisoned_allocations(which):
            made = [torch.empty(2, 2), torch.empty_like(base), torch.empty_strided((2, 2), (2, 1)),
                    base.new_empty((2, 2)), base.new_empty_strided((2, 2), (2, 1))]
        for t in made:
            assert _all_poison(t, which), t
    assert torch.Tensor.new_empty_strided is not None and base.new_empty_strided((1,), (1,)).shape == (1,)


def test_an_allocator_taken_when_the_module_loaded_is_poisoned_too(tmp_path):
    """Red team: the allocators were swapped in around each call, so a launcher that kept
    ``torch.empty_like`` from its import held the unpoisoned original.  They are wrapped
    before any candidate module loads (as the worker orders it) and stay wrapped."""
    launches.install()
    path = tmp_path / "aliased.py"
    path.write_text(ALIASED)
    entry = load_kernel(path, "candidate").rms_norm
    x = torch.ones(3, 8)
    # Each pattern in turn: memory the allocator reused from the call before holds the other
    # one, so a pass is the poisoning of this call, not what the memory held.
    for which in (0, 1, 0):
        outs = guarded_call(entry, [x, torch.ones(8)], {"eps": 1e-6}, which)
        assert all(_all_poison(t, which) for t in outs), which


def test_a_survey_call_and_a_judged_call_find_the_same_allocators():
    """A launcher cannot tell a survey call (nothing written) by what torch.empty* are."""
    launches.install()
    seen = []
    for which in (None, 0, 1, None):
        with poisoned_allocations(which):
            seen.append((torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty,
                         torch.Tensor.new_empty_strided))
    assert all(s == seen[0] for s in seen)
