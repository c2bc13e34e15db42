"""Zero-tolerance comparison on raw bits, with the first differing index."""

from tik_agent.bits import first_mismatch


def assert_same_bits(expected, actual, what: str = "") -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, (
        f"{what}: {actual.dtype}{tuple(actual.shape)} vs {expected.dtype}{tuple(expected.shape)}")
    mm = first_mismatch(expected, actual)
    assert mm is None, f"{what}: {mm.describe()}"
