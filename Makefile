# The two commands of the README: `make demo` and `make test`.
# Both create .venv when it is missing and install what is needed; a second
# run finds the stamp up to date and starts at once.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.tik-agent-installed
# On a machine without CUDA and without a local CPU wheel, point this at
# PyTorch's CPU index (https://download.pytorch.org/whl/cpu) to avoid a CUDA build.
TORCH_INDEX_URL ?=
TORCH_VERSION ?= 2.13.0

.PHONY: demo test test-ray test-fast install clean-venv seed-wheels

install: $(STAMP)

$(STAMP): pyproject.toml constraints/cpu.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -c "import torch" 2>/dev/null || \
		$(BIN)/pip install -q $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL)) torch==$(TORCH_VERSION)
	$(BIN)/pip install -q -c constraints/cpu.txt -e '.[test,llm,ray,hf,trl]'
	@$(BIN)/pip install -q -c constraints/cpu.txt -e '.[sandbox]' || \
		echo "notice: pyseccomp did not install; the evaluation sandbox runs without its seccomp layer"
	@sh scripts/install-sandbox-tools.sh
	@touch $(STAMP)

# A short offline optimisation of rmsnorm (forward and backward judged): no API
# key, no GPU; two attempts, ending with at least one faster kernel in the
# lineage, exported as a wheel into dist/, then the on-policy check with that
# wheel's kernel (sampler and trainer log-probs agree bit for bit: ratio 1.0),
# and last the same check on a transformers Llama built from the bundled tiny
# config (generate() on left-padded prompts against a padded training step,
# through the drop-ins of the bundled seeds' kernels).
# Every demo gets a run directory of its own: an earlier demo's run is kept.
DEMO_RUN = runs/demo-rmsnorm-$(shell date +%Y%m%d-%H%M%S)

demo: $(STAMP)
	@run="$(DEMO_RUN)"; set -ex; \
	$(BIN)/tik-agent optimize rmsnorm --agent offline --iterations 2 --run-dir "$$run"; \
	$(BIN)/tik-agent lineage "$$run"; \
	$(BIN)/tik-agent export "$$run" --out dist/; \
	$(BIN)/tik-agent onpolicy --sequences 2 --wheel "$$(ls -t dist/tik_kernel_rmsnorm-*.whl | head -1)"; \
	$(BIN)/tik-agent onpolicy --hf tiny-llama --sequences 3 --new-tokens 4

# The wheels of the five bundled seeds themselves, each certified by its own audit, into one
# folder (SEED_WHEELS): kernels on day one, before any search.  An audit the seed-audit cache
# holds (from an optimize run or an earlier export on this machine, same versions) is reused;
# otherwise each seed is audited first, minutes under the CPU interpreter.  Files already in the
# folder are never overwritten: an identical wheel is kept, another one is an error (exit 2).
SEEDS = rmsnorm add_rmsnorm matmul attention logprobs
SEED_WHEELS ?= dist/seeds

seed-wheels: $(STAMP)
	@set -e; for seed in $(SEEDS); do $(BIN)/tik-agent export $$seed --out $(SEED_WHEELS); done

# Both cores: pytest-xdist with two workers, each test file kept on one worker so that its
# module fixtures hold (what several files need is built once per session: tests/shared.py).
# --durations shows where the time goes.  The Ray tests start a cluster of their own and
# run alone, in `make test-ray` (CI runs it first, .ci/run): under the load of the other
# tests, their timed verdicts on that cluster would be noise.
PYTEST_XDIST = -n 2 --dist loadfile
DURATIONS = --durations=25

test: $(STAMP)
	$(BIN)/python -m pytest -q $(DURATIONS) $(PYTEST_XDIST) -m "not ray"

test-ray: $(STAMP)
	$(BIN)/python -m pytest -q $(DURATIONS) -m ray tests/test_ray_executor.py

# The development tier: everything that neither evaluates, optimizes nor exports (under 2 min).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q $(DURATIONS) $(PYTEST_XDIST) -m "not slow and not ray"

clean-venv:
	rm -rf $(VENV)
