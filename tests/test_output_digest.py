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
