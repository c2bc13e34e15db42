"""A kernel file that cannot be imported is one line naming the file (and the line, where there
is one); found by the newcomer's trial: a file with a NUL byte read "bin.py:None: syntax error"."""

from __future__ import annotations

import pytest

from tik_agent.cli import run as cli
from tik_agent.sandbox.harness import KernelLoadError, load_kernel


def test_a_file_the_parser_cannot_read_names_no_line(tmp_path):
    path = tmp_path / "kernel.py"
    path.write_bytes(b"import torch\n\x00\n")
    with pytest.raises(KernelLoadError) as info:
        load_kernel(path, "test")
    assert str(info.value).startswith(f"{path}: syntax error: ") and "None" not in str(info.value)


def test_a_syntax_error_names_its_line(tmp_path):
    """Control: an ordinary syntax error keeps its line number."""
    path = tmp_path / "kernel.py"
    path.write_text("import torch\ndef f(:\n")
    with pytest.raises(KernelLoadError, match=rf"^{path}:2: syntax error: "):
        load_kernel(path, "test")


def test_onpolicy_names_the_file_of_a_kernel_with_a_nul_byte(tmp_path, capsys):
    path = tmp_path / "bin.py"
    path.write_bytes(b"import torch\n\x00\n")
    assert cli(["onpolicy", "--kernel", f"rmsnorm={path}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}: syntax error" in err and "None" not in err


def test_onpolicy_names_a_kernel_file_that_is_not_utf8(tmp_path, capsys):
    """Since the shape check reads the file before the kernel is loaded (the --hf merge), a 0xff
    byte was a UnicodeDecodeError traceback."""
    path = tmp_path / "bin.py"
    path.write_bytes(b"\x00\xff\xfe binary")
    assert cli(["onpolicy", "--kernel", f"rmsnorm={path}"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: {path}: not UTF-8 text (byte 0xff at offset 1)"
