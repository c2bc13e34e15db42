"""The prompts explain the backward contract when, and only when, the seed has one."""

import dataclasses

from test_prompts import make_context
from tik_agent.agents.prompts import PromptRenderer
from tik_agent.spec.seeds import BUNDLED_DIR


def test_backward_contract_appears_for_a_seed_with_a_backward_entry():
    spec_text = (BUNDLED_DIR / "rmsnorm" / "spec.toml").read_text()
    context = dataclasses.replace(make_context(), spec_text=spec_text)
    system = PromptRenderer().render(context).system
    assert "`rms_norm_backward`" in system
    assert "every** batch size" in system and "never depend on M" in system


def test_no_backward_section_without_one():
    system = PromptRenderer().render(make_context()).system
    assert "backward entry" not in system


def test_the_attention_prompt_explains_per_slot_gradients_and_rows_seeds_do_not_get_it():
    attention = (BUNDLED_DIR / "attention" / "spec.toml").read_text()
    system = PromptRenderer().render(dataclasses.replace(make_context(), spec_text=attention)).system
    assert "`attention_backward`" in system and "per cache slot" in system and "must hold zeros" in system
    rmsnorm = (BUNDLED_DIR / "rmsnorm" / "spec.toml").read_text()
    assert "per cache slot" not in PromptRenderer().render(dataclasses.replace(make_context(), spec_text=rmsnorm)).system
