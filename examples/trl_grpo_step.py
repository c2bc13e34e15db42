"""One GRPO step of TRL's GRPOTrainer on the bundled tiny Llama (random weights, a word-level
tokenizer built locally: nothing is downloaded), with the bundled seeds' kernels enabled
through their drop-ins, then the same step on stock torch.

    pip install -e '.[trl]'            # or: make install
    python examples/trl_grpo_step.py

Logs, per run, how many generated tokens kept the same bits between generate() (the
sampler's log-probs, kept from its logits) and the GRPO loss's forward, and the largest
|ratio - 1|.  Exits 1 unless the run with the kernels is exactly on-policy.
"""

from __future__ import annotations

import logging
import sys
import tempfile
from pathlib import Path

import torch

from tik_agent.backends import interpreter

if not torch.cuda.is_available():
    interpreter.activate()  # before anything imports triton (transformers and trl do)

from tik_agent.onpolicy import dropins, hf, trl_grpo  # noqa: E402
from tik_agent.onpolicy.kernels import KINDS  # noqa: E402
from tik_agent.spec.schema import load_spec  # noqa: E402
from tik_agent.spec.seeds import BUNDLED_DIR  # noqa: E402

PROMPTS = ["t5 t6 t7", "t9 t10 t11 t12 t13"]  # different lengths: generate() left-pads them


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    source = hf.find("tiny-llama")
    config = hf.load_config(source)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        kernels = dropins.load({kind: load_spec(BUNDLED_DIR / kind).source for kind in KINDS}, work / "dropins")
        tokenizer = trl_grpo.tiny_tokenizer(config.vocab_size, work / "tokenizer")
        results = {}
        for name, routes in (("kernels", kernels), ("stock torch", None)):
            model = hf.build_model(source, config, "float32", seed=0)
            results[name] = trl_grpo.run_step(model, tokenizer, PROMPTS, work / name.replace(" ", "-"),
                                              kernels=routes)
    ok = results["kernels"].identical == results["kernels"].tokens and results["kernels"].max_abs_ratio_minus_1 == 0
    logging.getLogger("trl_grpo_step").info("on-policy with the kernels: %s", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
