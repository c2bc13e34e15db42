"""bits.output_digest: what a timed call returned, kept as a digest for the judge."""

import torch

from tik_agent.bits import output_digest


def test_each_output_of_a_tuple_counts():
    a, b = torch.zeros(4), torch.ones(4)
    assert output_digest((a, b)) == output_digest((a.clone(), b.clone()))
    # a second output that differs must change the digest (it once read "not a tensor: tuple")
    assert output_digest((a, b)) != output_digest((a, torch.full((4,), 2.0)))
    assert output_digest((a, b)) != output_digest((b, a))


def test_raw_bits_and_strides_count():
    assert output_digest(torch.tensor([0.0])) != output_digest(torch.tensor([-0.0]))
    t = torch.arange(6.0).reshape(2, 3)
    assert output_digest(t) != output_digest(t.t().contiguous().t())


def test_every_allocator_that_hands_out_unwritten_memory_is_poisoned_during_a_judged_call():
    """Red team: Tensor.new_empty_strided (allowed by the static rules) was not poisoned,
    so an output allocated with it held whatever the allocator reused; in the graph
    stand-in that can be the seed's output on the same inputs, freed a moment before."""
    import torch

    from tik_agent.sandbox.harness import POISON, poisoned_allocations

    base = torch.ones(4)
    for which in (0, 1):
        with poisoned_allocations(which):
            made = [torch.empty(2, 2), torch.empty_like(base), torch.empty_strided((2, 2), (2, 1)),
                    base.new_empty((2, 2)), base.new_empty_strided((2, 2), (2, 1))]
        for t in made:
            assert bool((t.view(torch.int32) == POISON[4][which]).all()), t
    assert torch.Tensor.new_empty_strided is not None and base.new_empty_strided((1,), (1,)).shape == (1,)
