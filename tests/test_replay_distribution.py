"""The compile-only replay stands for a node: a seed's launcher that distributes its work by
the tensors' device takes its GPU values there (``NAME_GPU`` beside ``NAME``), although the
replay's tensors are on the CPU.  Without it the kernels table would show the interpreter's
distribution (rmsnorm's dx on 16-row programs: 255 registers and spills on sm_90)."""

import types

from tik_agent.backends.compile_rehearsal import _entry, _spec, as_on_a_gpu


def test_each_gpu_value_replaces_its_cpu_name_and_nothing_else():
    module = types.ModuleType("m")
    module.ROWS, module.ROWS_GPU, module.BLOCK, module.ONLY_GPU = 16, 1, 2048, 7
    as_on_a_gpu(module)
    assert (module.ROWS, module.ROWS_GPU, module.BLOCK) == (1, 1, 2048)
    assert not hasattr(module, "ONLY")  # a _GPU name without its CPU name creates nothing


def test_the_rmsnorm_seed_replays_with_its_gpu_backward_distribution():
    step = _entry(_spec("rmsnorm"))
    names = step.backward.__globals__
    assert names["BWD_ROWS_PER_PROGRAM"] == names["BWD_ROWS_PER_PROGRAM_GPU"] == 1
    assert names["DW_COMBINE_N"] == names["DW_COMBINE_N_GPU"] == 128
    assert names["DW_COMBINE_WARPS"] == names["DW_COMBINE_WARPS_GPU"] == 1
    assert names["DW_BLOCK_N"] == 2048  # no GPU value: the same everywhere
    names = _entry(_spec("add_rmsnorm")).backward.__globals__
    assert names["DW_COMBINE_N"] == names["DW_COMBINE_N_GPU"] == 128
    names = _entry(_spec("logprobs")).forward.__globals__
    assert names["SPLIT"] is names["SPLIT_GPU"] is True


def test_a_seed_loaded_for_judging_keeps_its_cpu_distribution():
    """Negative control: only the replay applies the GPU values."""
    from tik_agent.sandbox.harness import load_seed_entry

    names = load_seed_entry(_spec("rmsnorm")).backward.__globals__
    assert (names["BWD_ROWS_PER_PROGRAM"], names["DW_COMBINE_N"]) == (16, 2048)
