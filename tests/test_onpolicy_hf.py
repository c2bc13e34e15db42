"""``tik-agent onpolicy --hf``: what it takes (a config, a checkpoint directory, a bundled name),
what it refuses (one line, exit 2), the prompts it pads, and the whole check on the tiny Llama."""

from __future__ import annotations

import json

import pytest
import torch

from hfutil import tiny_config, tiny_model, transformers
from tik_agent import cli
from tik_agent.errors import UsageError
from tik_agent.onpolicy import hf


def test_a_bundled_name_a_config_file_and_a_directory_are_found(tmp_path):
    bundled = hf.find("tiny-llama")
    assert bundled.config == hf.CONFIG_DIR / "tiny-llama.json" and not bundled.weights
    assert "tiny-llama" in hf.bundled_configs()
    (tmp_path / "config.json").write_text(bundled.config.read_text())
    for given in (tmp_path, tmp_path / "config.json"):
        found = hf.find(str(given))
        assert found.config == tmp_path / "config.json" and not found.weights and "random weights" in found.text


@pytest.mark.parametrize("content,expected", [
    (None, "no such file or directory (bundled configs: tiny-llama"),
    ("{not json", "config.json: not a readable JSON config"),
    ('{"vocab_size": 8}', "config.json: model_type: missing"),
    ('{"model_type": "no-such-model"}', "config.json: model_type:"),
    ('{"model_type": "t5"}', "config.json: model_type: t5 is an encoder-decoder"),
])
def test_bad_input_is_one_line_naming_the_file_and_exit_2(tmp_path, capsys, content, expected):
    transformers()
    path = tmp_path / "model"
    if content is not None:
        path.mkdir()
        (path / "config.json").write_text(content)
    assert cli.run(["onpolicy", "--hf", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1, err


def test_a_model_outside_the_kernels_contract_is_one_line_naming_the_reason(tmp_path, capsys):
    """hidden 64 over 2 heads is a head dim of 32; the attention kernel is certified for 64 and 128."""
    transformers()
    config = json.loads(hf.find("tiny-llama").config.read_text())
    del config["head_dim"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert cli.run(["onpolicy", "--hf", str(tmp_path), "--sequences", "1", "--new-tokens", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "llama in float32 calls a kernel outside its certified contract" in err, err
    assert "head dim 32 is not certified (certified: [64, 128])" in err and len(err.splitlines()) == 1, err


def test_prompts_are_left_padded_ordinary_tokens_of_different_lengths():
    config = tiny_config("llama")
    prompts = hf.make_prompts(config, 4, seed=3)
    lengths = prompts.attention_mask.sum(1).tolist()
    assert lengths == [3, 5, 7, 9] and prompts.input_ids.shape == (4, 9)
    for row, n in enumerate(lengths):
        assert prompts.attention_mask[row, -n:].all() and not prompts.attention_mask[row, :-n].any()
        assert (prompts.input_ids[row, :-n] == config.pad_token_id).all()
        assert not set(prompts.input_ids[row, -n:].tolist()) & {0, 1, 2}  # no pad, bos or eos inside


def test_a_checkpoint_directory_is_loaded_with_its_weights(tmp_path):
    saved = tiny_model("llama", seed=5)
    saved.save_pretrained(tmp_path)
    found = hf.find(str(tmp_path))
    assert found.weights and found.text == f"checkpoint {tmp_path}"
    loaded = hf.build_model(found, hf.load_config(found), "float32", seed=0)  # the seed draws nothing here
    assert loaded.config._attn_implementation == "sdpa" and not loaded.training
    for (name, a), (_, b) in zip(saved.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    # Control: from the config alone the weights are drawn from the seed, not the checkpoint's.
    drawn = hf.build_model(hf.find(str(tmp_path / "config.json")), hf.load_config(found), "float32", seed=0)
    assert not torch.equal(drawn.lm_head.weight, saved.lm_head.weight)


def test_without_transformers_the_option_says_how_to_install_it(monkeypatch):
    import builtins

    real = builtins.__import__

    def blocked(name, *args, **kwargs):
        if name == "transformers":
            raise ImportError("blocked")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", blocked)
    with pytest.raises(UsageError, match=r"pip install 'tik-agent\[hf\]'"):
        hf.load_config(hf.find("tiny-llama"))


@pytest.mark.slow
def test_the_check_on_the_bundled_tiny_llama(capsys):
    """The whole command as make demo runs it, smaller: certified ratios exactly 1.0 in float32
    and bfloat16, stock figures beside them, and which ops reached a kernel."""
    transformers()
    assert cli.run(["onpolicy", "--hf", "tiny-llama", "--json", "--sequences", "2", "--new-tokens", "2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["on_policy"] is True and data["ratios_exactly_one"] is True and data["label"] == "certified"
    assert data["model"].startswith("llama from ") and data["model"].endswith("tiny-llama.json (random weights)")
    certified = [r for r in data["results"] if r["kernels"] == "certified"]
    assert [r["dtype"] for r in certified] == ["float32", "bfloat16"]
    assert all(r["identical_fraction"] == 1.0 and r["max_abs_ratio_minus_1"] == 0.0 for r in certified)
    assert {r["kernels"] for r in data["results"]} == {"certified", "stock"}
    calls = data["ops"]["kernel_calls"]
    assert calls["attention"] == 2 * (2 + 2) and calls["matmul"] > 0 and "rmsnorm" not in calls
    assert "aten.mean" in data["ops"]["torch_reductions"]  # transformers' RMSNorm, on torch
