"""Prompt templates: selection, content, user overrides and errors."""

import dataclasses
import shutil

import pytest

from tik_agent.agents.base import AgentContext, AttemptFeedback
from tik_agent.agents.prompts import (
    PROPOSE,
    REPAIR_COMPILE,
    REPAIR_PARITY,
    REQUIRED,
    PromptRenderer,
    bundled_prompts_dir,
    choose_template,
)
from tik_agent.errors import UsageError

SEED = '''import torch
import triton
import triton.language as tl

ROWS_PER_PROGRAM = 1


@triton.jit
def _scale_kernel(x_ptr, y_ptr, N, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    # SEED-MARKER
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    offs = rows[:, None] * N + cols[None, :]
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2.0)


def scale(x):
    y = torch.empty_like(x)
    _scale_kernel[(triton.cdiv(x.shape[0], ROWS_PER_PROGRAM),)](x, y, x.shape[1], ROWS=ROWS_PER_PROGRAM, BLOCK=x.shape[1])
    return y
'''
PARENT = SEED.replace("ROWS_PER_PROGRAM = 1", "ROWS_PER_PROGRAM = 2").replace("SEED-MARKER", "PARENT-MARKER")


def feedback(attempt_id, outcome, parent_id="p1", **fields):
    return AttemptFeedback(attempt_id=attempt_id, parent_id=parent_id, outcome=outcome, **fields)


def make_context(recent=(), device="cpu (triton interpreter)", parent_source=PARENT):
    return AgentContext(
        spec_text='name = "scale"\n[tunables]\nROWS_PER_PROGRAM = [1, 2, 4]\n',
        entry="scale",
        seed_name="scale",
        tunables={"ROWS_PER_PROGRAM": [1, 2, 4]},
        seed_source=SEED,
        parent_id="p1",
        parent_source=parent_source,
        parent_speedup=1.25,
        timing_table=[{"name": "decode", "shape": "(3, 64)", "seed_ms": 2.0, "parent_ms": 1.6}],
        recent=list(recent),
        device=device,
        rng_seed=0,
        attempt_index=3,
    )


COMPILE_ERROR = "\n".join(f"  frame {i}" for i in range(100)) + "\nCompilationError: arange's range must be a power of 2"
MISMATCH = {"case": "batch=1 of (7, 4097)", "index": [0, 12], "expected_bits": "0x3f800000", "actual_bits": "0x3f800001", "ulps": 1}


@pytest.mark.parametrize(
    "recent, expected",
    [
        ([], PROPOSE),
        ([feedback("a1", "compile_error")], REPAIR_COMPILE),
        ([feedback("a1", "parity_failed")], REPAIR_PARITY),
        ([feedback("a1", "compile_error"), feedback("a2", "slower")], PROPOSE),
        ([feedback("a1", "parity_failed"), feedback("a2", "compile_error", parent_id="other")], REPAIR_PARITY),
        ([feedback("a1", "compile_error", parent_id="other")], PROPOSE),
        ([feedback("a1", "accepted", speedup=1.1)], PROPOSE),
    ],
)
def test_template_choice_follows_the_newest_attempt_from_this_parent(recent, expected):
    assert choose_template(make_context(recent)) == expected


def test_propose_prompt_carries_contract_seed_parent_timings_and_history():
    recent = [
        feedback("a1", "slower", rationale="tried ROWS 4", speedup=0.9, source_diff="-ROWS_PER_PROGRAM = 2\n+ROWS_PER_PROGRAM = 4\n"),
        feedback("a2", "rejected_static", reason="imports os: file access is forbidden"),
    ]
    rendered = PromptRenderer().render(make_context(recent))
    assert rendered.template == PROPOSE
    assert "bit for bit" in rendered.system and "off-policy" in rendered.system
    assert "@triton.autotune" in rendered.system and "`scale`" in rendered.system
    assert "Triton interpreter on CPU" in rendered.system
    assert "SEED-MARKER" in rendered.user and "PARENT-MARKER" in rendered.user
    assert "| decode | (3, 64) | 2.0000 | 1.6000 | 1.250x |" in rendered.user
    assert "tried ROWS 4" in rendered.user and "+ROWS_PER_PROGRAM = 4" in rendered.user
    assert "imports os: file access is forbidden" in rendered.user
    assert "`ROWS_PER_PROGRAM`: 1, 2, 4" in rendered.user


def test_gpu_device_drops_the_interpreter_note():
    rendered = PromptRenderer().render(make_context(device="cuda (NVIDIA H200)"))
    assert "interpreter" not in rendered.system
    assert "NVIDIA H200" in rendered.system


def test_parent_equal_to_seed_is_not_repeated():
    rendered = PromptRenderer().render(make_context(parent_source=SEED))
    assert rendered.user.count("SEED-MARKER") == 1
    assert "The parent is the seed itself" in rendered.user


def test_repair_compile_shows_the_trimmed_error_and_the_change():
    last = feedback("a7", "compile_error", rationale="bigger blocks", compile_error=COMPILE_ERROR, source_diff="-BLOCK = 64\n+BLOCK = 100\n")
    rendered = PromptRenderer().render(make_context([last]))
    assert rendered.template == REPAIR_COMPILE
    assert "arange's range must be a power of 2" in rendered.user
    assert "frame 99" in rendered.user and "frame 0\n" not in rendered.user  # the tail is kept
    assert "lines omitted" in rendered.user
    assert "+BLOCK = 100" in rendered.user and "bigger blocks" in rendered.user
    assert rendered.user.count("+BLOCK = 100") == 1  # shown once, in the task


def test_repair_parity_shows_the_first_mismatch_bits():
    last = feedback("a8", "parity_failed", reason="2 of 9 cases differ", first_mismatch=MISMATCH)
    rendered = PromptRenderer().render(make_context([last]))
    assert rendered.template == REPAIR_PARITY
    for value in ("batch=1 of (7, 4097)", "0x3f800000", "0x3f800001", "ulps"):
        assert value in rendered.user
    assert "2 of 9 cases differ" in rendered.user


def test_transcript_holds_both_messages_and_redacts_keys():
    last = feedback("a1", "crashed", reason="leaked sk-ant-api03-abcdefghijklmnopqrstuvwxyz in output")
    rendered = PromptRenderer().render(make_context([last]))
    transcript = rendered.transcript()
    assert transcript.startswith("[system]\n") and "\n[user]\n" in transcript
    assert "abcdefghijklmnop" not in transcript and "[REDACTED]" in transcript


def test_user_directory_overrides_one_template(tmp_path):
    (tmp_path / "system.md.j2").write_text("Custom system for {{ entry }} on {{ device }}.\n")
    renderer = PromptRenderer(tmp_path)
    rendered = renderer.render(make_context())
    assert rendered.system == "Custom system for scale on cpu (triton interpreter).\n"
    assert "SEED-MARKER" in rendered.user  # propose still comes from the bundled set


def test_missing_template_names_the_file(tmp_path):
    for name in REQUIRED:
        if name != "repair_parity.md.j2":
            shutil.copy(bundled_prompts_dir() / name, tmp_path / name)
    with pytest.raises(UsageError, match="repair_parity.md.j2"):
        PromptRenderer(bundled_dir=tmp_path)


def test_missing_include_names_the_file(tmp_path):
    for name in REQUIRED:
        shutil.copy(bundled_prompts_dir() / name, tmp_path / name)
    renderer = PromptRenderer(bundled_dir=tmp_path)  # _context.md.j2 is absent
    with pytest.raises(UsageError, match="_context.md.j2"):
        renderer.render(make_context())


def test_undefined_variable_is_an_error_not_an_empty_string(tmp_path):
    (tmp_path / "propose.md.j2").write_text("{{ no_such_variable }}\n")
    with pytest.raises(UsageError, match="no_such_variable"):
        PromptRenderer(tmp_path).render(make_context())


def test_template_syntax_error_names_file_and_line(tmp_path):
    (tmp_path / "system.md.j2").write_text("line one\n{% if %}\n")
    with pytest.raises(UsageError, match=r"system.md.j2:2"):
        PromptRenderer(tmp_path)


def test_prompts_directory_must_exist(tmp_path):
    with pytest.raises(UsageError, match="not a directory"):
        PromptRenderer(tmp_path / "nope")


def test_rendering_is_deterministic():
    context = make_context([feedback("a1", "parity_failed", first_mismatch=MISMATCH)])
    assert PromptRenderer().render(context) == PromptRenderer().render(dataclasses.replace(context))


def test_attention_contract_is_told_only_for_the_sequences_layout():
    from tik_agent.spec.seeds import BUNDLED_DIR

    renderer = PromptRenderer()
    attention = dataclasses.replace(make_context(), spec_text=(BUNDLED_DIR / "attention" / "spec.toml").read_text())
    system = renderer.render(attention).system
    assert "split-KV" in system and "decoded alone" in system and "block table" in system
    assert "split-KV" not in renderer.render(make_context()).system  # the negative control


def test_several_outputs_are_named_in_order():
    from tik_agent.spec.seeds import BUNDLED_DIR

    fused = dataclasses.replace(make_context(), spec_text=(BUNDLED_DIR / "add_rmsnorm" / "spec.toml").read_text())
    system = PromptRenderer().render(fused).system
    assert "returns 2 outputs as a tuple, in this order: y, new_residual" in system
    assert "outputs as a tuple" not in PromptRenderer().render(make_context()).system
