# Corral: one command for each job. `make check` is what CI runs (via .ci/run).
.PHONY: setup run demo test unit integration lint typecheck imports chart bench bench-small check clean

VENV ?= .venv
PY := $(VENV)/bin/python

setup:
	bash ops/setup.sh

run: setup  ## the main job: Corral up on the local cloud, the sample workload through it, a clean stop
	bash ops/demo.sh

demo: run

lint:
	$(VENV)/bin/ruff check shared services workers tests
	$(VENV)/bin/ruff format --check shared services workers tests

# mypy sees the folders under their installed names (corral.shared, ...) through symlinks, so
# strict mode on the core checks real types instead of unresolved imports.
TYPECHECK_ROOT := build/typecheck
typecheck:
	@mkdir -p $(TYPECHECK_ROOT)/corral
	@for d in shared services workers; do ln -sfn "$(CURDIR)/$$d" $(TYPECHECK_ROOT)/corral/$$d; done
	MYPYPATH=$(TYPECHECK_ROOT) $(VENV)/bin/mypy -p corral.shared -p corral.services -p corral.workers

imports:
	$(VENV)/bin/lint-imports

chart:  ## the Helm chart: Helm's lint and template, then the Kubernetes and KEDA schemas
	$(PY) -m pytest tests/unit/test_helm_chart.py -q

unit:
	$(PY) -m pytest tests -m "not integration and not bench" -q

integration:
	$(PY) -m pytest tests -m integration -q

test:
	$(PY) -m pytest tests -m "not bench" -q

bench-small:  ## the benchmarks at a small size, so they cannot rot
	CORRAL_BENCH_SCALE=small $(PY) -m pytest tests/bench -m bench -q -s -p no:randomly

bench:
	$(PY) -m pytest tests/bench -m bench -q -s

check: setup lint typecheck imports test bench-small

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache
