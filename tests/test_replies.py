"""Extracting a candidate file from model replies."""

import pytest

from tik_agent.agents.replies import ParsedReply, check_candidate, parse_reply

KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < N), mask=offs < N)


def copy(x):
    y = torch.empty_like(x)
    _k[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
    return y
'''


def fenced(code: str, tag: str = "python", fence: str = "```") -> str:
    return f"{fence}{tag}\n{code}{fence}\n"


def test_fenced_block_with_rationale_outside():
    reply = "I process two rows per program.\n\n" + fenced(KERNEL) + "\nThis keeps the order."
    parsed = parse_reply(reply, "copy")
    assert parsed.source == KERNEL
    assert parsed.error is None
    assert "two rows per program" in parsed.rationale
    assert "keeps the order" in parsed.rationale
    assert "@triton.jit" not in parsed.rationale


def test_last_usable_block_wins_over_fragments_and_earlier_drafts():
    draft = KERNEL.replace("BLOCK=128", "BLOCK=64")
    fragment = "offs = tl.arange(0, BLOCK)\n"
    reply = "Draft:\n" + fenced(draft) + "A detail:\n" + fenced(fragment) + "Final:\n" + fenced(KERNEL)
    assert parse_reply(reply, "copy").source == KERNEL
    # A fragment after the final file does not hide it.
    reply = "Final:\n" + fenced(KERNEL) + "Note the line:\n" + fenced(fragment)
    assert parse_reply(reply, "copy").source == KERNEL


@pytest.mark.parametrize("tag", ["python", "py", "", "Python3"])
@pytest.mark.parametrize("fence", ["```", "~~~", "````"])
def test_fence_styles(tag, fence):
    assert parse_reply("Here:\n" + fenced(KERNEL, tag, fence), "copy").source == KERNEL


def test_non_python_blocks_are_ignored():
    reply = fenced("-BLOCK=64\n+BLOCK=128\n", tag="diff") + fenced(KERNEL)
    assert parse_reply(reply, "copy").source == KERNEL
    parsed = parse_reply(fenced("pip install triton\n", tag="bash"), "copy")
    assert parsed.source is None


def test_whole_file_reply_is_accepted():
    parsed = parse_reply(KERNEL, "copy")
    assert parsed.source == KERNEL
    assert parsed.rationale == ""


def test_unterminated_block_is_used_when_complete():
    parsed = parse_reply("Here it is:\n```python\n" + KERNEL, "copy")
    assert parsed.source == KERNEL


def test_indented_fence_is_dedented():
    body = "".join("  " + line if line.strip() else line for line in KERNEL.splitlines(True))
    reply = "1. The file:\n  ```python\n" + body + "  ```\n"
    assert parse_reply(reply, "copy").source == KERNEL


@pytest.mark.parametrize(
    "reply, fragment",
    [
        ("", "empty reply"),
        ("   \n", "empty reply"),
        ("I cannot help with that.", "no fenced python code block"),
        (fenced("def copy(x):\n    return x\n"), "no @triton.jit function"),
        (fenced(KERNEL.replace("def copy", "def other")), "no module-level function named 'copy'"),
        (fenced(KERNEL.replace("return y", "return y)")), "syntax error at line"),
    ],
)
def test_no_usable_code_is_a_reason_not_a_crash(reply, fragment):
    parsed = parse_reply(reply, "copy")
    assert parsed.source is None
    assert fragment in parsed.error


def test_jit_decorator_forms():
    assert check_candidate(KERNEL.replace("@triton.jit", "@triton.jit(do_not_specialize=['N'])"), "copy") is None
    assert check_candidate(KERNEL.replace("@triton.jit", "@jit"), "copy") is None


def test_parsed_reply_requires_exactly_one_of_source_and_error():
    with pytest.raises(ValueError):
        ParsedReply(None, "", None)
    with pytest.raises(ValueError):
        ParsedReply("x = 1\n", "", "also an error")


def test_long_rationale_is_truncated():
    parsed = parse_reply("word " * 5000 + "\n" + fenced(KERNEL), "copy")
    assert parsed.source == KERNEL
    assert len(parsed.rationale) < 4100
    assert parsed.rationale.endswith("[...]")
