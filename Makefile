# Corral: one command for each job. `make check` is what CI runs (via .ci/run).
.PHONY: ray-venv setup run demo test unit integration lint typecheck imports chart bench bench-small chaos fuzz check clean

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

ray-venv:  ## Ray for the real-Ray tests, in ~/.cache/corral (tests/ray_venv.py; the tests make it when missing)
	$(PY) tests/ray_venv.py

chart:  ## the Helm chart (lint, template, schemas, Pod Security, alerts) and the image lock
	$(PY) -m pytest tests/unit/test_helm_chart.py tests/unit/test_helm_policies.py tests/unit/test_helm_alerts.py tests/unit/test_image_lock.py -q

unit:
	$(PY) -m pytest tests -m "not integration and not bench" -q

integration:
	$(PY) -m pytest tests -m integration -q

test:
	$(PY) -m pytest tests -m "not bench" -q --durations=30

bench-small:  ## the benchmarks at a small size, so they cannot rot
	CORRAL_BENCH_SCALE=small $(PY) -m pytest tests/bench -m bench -q -s -p no:randomly

bench:
	$(PY) -m pytest tests/bench -m bench -q -s

# Control-plane faults at full size (the default test run has a short version of each): three
# rounds of 40 launches with redis-server SIGKILLed 1 s in, the Sentinel failover, and 300
# launches while workers, beat, the API and Redis are killed or paused at random. It prints
# the counts: requests lost, failed for a control-plane reason, launched twice, leaked. And
# 20 SIGKILLs of the provisioning worker mid-attempt (the default test run does 6). And every
# kind of machine at once under 30 faults (test_chaos_kinds.py): three rounds of 10 direct
# launches, a preemption in a machine pool of 4 and in a Determined pool, a machine of each kind
# killed and a Ray cluster scaled to 5 workers and back; it prints lost, launched twice, leaked and
# assignments on machines no record holds, per kind.
chaos:
	CORRAL_REDIS_KILL_ROUNDS=3 CORRAL_REDIS_KILL_LAUNCHES=40 CORRAL_CHAOS_LAUNCHES=300 \
		CORRAL_CHAOS_STRIKES=15 CORRAL_CRASH_TRIALS=20 \
		CORRAL_CHAOS_KINDS_ROUNDS=3 CORRAL_CHAOS_KINDS_DIRECT=10 CORRAL_CHAOS_KINDS_POOL=4 \
		CORRAL_CHAOS_KINDS_WORKERS=5 CORRAL_CHAOS_KINDS_STRIKES=30 \
		$(PY) -m pytest tests/integration/test_redis_restart.py tests/integration/test_sentinel.py \
		tests/integration/test_chaos.py tests/integration/test_chaos_kinds.py \
		tests/integration/test_crash_trials.py \
		-m integration -q -s -p no:randomly --timeout 3600

# The API fuzzed from its OpenAPI document with many more examples than the default run, and
# the merge and autoscaler properties with 200 seeded examples each (the default run: 60).
fuzz:
	CORRAL_FUZZ_EXAMPLES=200 $(PY) -m pytest tests/integration/test_api_fuzz.py -m integration \
		-q -s -p no:randomly --timeout 3600
	CORRAL_PROPERTY_EXAMPLES=200 $(PY) -m pytest tests/unit/test_merge_properties.py \
		tests/unit/test_autoscaler_properties.py -q -p no:randomly --timeout 3600

check: setup lint typecheck imports test bench-small

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache
