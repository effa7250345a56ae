# sparkmirror: every target installs what it needs first; each install step is skipped when already done.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml dev/pyproject.toml | sha1sum | cut -c1-12)
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON = $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON = $(abspath $(PY))

.PHONY: help setup tools venv kafka kubernetes test test-fast demo bench bench-autoscale chaos campaign soak crds dev-up dev-down clean

help:
	@echo "make demo   - start two local Kafka clusters and mirror between them on local Spark (DEMO_ARGS=-v: with logs)"
	@echo "make test   - install what is missing, then run every test (the kind tests build their images here)"
	@echo "make bench  - sparkmirror vs Apache Kafka MirrorMaker 2, side by side"
	@echo "make bench-autoscale - the same 4x burst with autoscaling on and off through the operator (about 25 min; AUTOSCALE_ARGS=--help)"
	@echo "make campaign - load-sensitive proofs (a successor frozen mid-handoff, the operator killed at each step, autoscaling through the operator, one kill of each chaos kind) and the record path's fault tests, every record counted"
	@echo "make chaos  - fault campaign: SIGKILLs and outages under load on 3-broker clusters, every record counted (CHAOS_ARGS=--kills 5)"
	@echo "make soak   - memory over a 60-minute run at a steady rate, per kind of process; fails above 5 MB/h (SOAK_ARGS=--minutes 20 --warmup 5)"
	@echo "make crds   - regenerate crds/ from the pydantic model"

tools:
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed, found " + sys.version' 
	@command -v java >/dev/null || { echo "Java 17 is missing: installing openjdk-17 (Debian)"; apt-get update -q && apt-get install -yq openjdk-17-jdk-headless; }
	@command -v mvn >/dev/null || { echo "Maven is missing: installing maven (Debian)"; apt-get update -q && apt-get install -yq maven; }
	@command -v go >/dev/null || { echo "Go (1.24+) is needed to build kube-apiserver and etcd: see https://go.dev/doc/install"; exit 1; }

$(STAMP): pyproject.toml dev/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]' -e ./dev
	@rm -f $(VENV)/.installed-* && touch $@

venv: tools $(STAMP)

kafka: venv
	@$(PY) -c 'from sparkmirror_dev import install; install.kafka(); install.kafka_matrix()'

kubernetes: venv
	@$(PY) -c 'from sparkmirror_dev import install; install.kubernetes_tools()'

setup: venv kafka kubernetes

# Two phases: the modules marked `solo` (each loads both cores by itself: the kind e2e, three drivers at once,
# 3-broker clusters under faults) one after another with nothing beside them;
# then the rest on two pytest workers, one module each at a time, longest first (their `minutes` mark): most of
# them wait on brokers, drivers and timeouts more than they compute. TEST_WORKERS=0: the rest in one process too.
# Both phases run; either failing (or collecting nothing) fails the target.
TEST_WORKERS ?= 2

test: setup
	@rc=0; \
	$(VENV)/bin/pytest -q -m solo $(PYTEST_ARGS) || rc=$$?; \
	$(VENV)/bin/pytest -q -m "not solo" $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder) $(PYTEST_ARGS) || rc=$$?; \
	exit $$rc

demo: venv kafka
	$(PY) -m sparkmirror_dev.demo $(DEMO_ARGS)

bench: setup
	$(PY) -m bench $(BENCH_ARGS)

# The operator on the local API server, the stand-in Spark operator, real Kafka: bench/results/autoscale.{json,md,png}
bench-autoscale: setup
	$(PY) -m bench.autoscale $(AUTOSCALE_ARGS)

chaos: setup
	$(PY) -m bench.chaos $(CHAOS_ARGS)

# Load-sensitive end-to-end proofs kept out of `make test`: a successor frozen (SIGSTOP) mid-handoff; the operator
# SIGKILLed at each step of a handoff; autoscaling through the operator on real Spark, counted; a kill of each of the
# chaos campaign's five kinds on 3-broker clusters; then the record path's variants of the long fault tests (SIGKILLs,
# a source outage, transforms through crashes, certificate rotation, a failover), whose batch-path variants run in
# `make test`.
campaign: setup
	SPARKMIRROR_CAMPAIGN=1 $(VENV)/bin/pytest -q -p no:cacheprovider tests/operator/test_handoff_rollback_e2e.py tests/operator/test_handoff_operator_killed.py tests/operator/test_autoscale_e2e.py tests/job/test_chaos_short.py $(PYTEST_ARGS)
	SPARKMIRROR_CAMPAIGN=1 $(VENV)/bin/pytest -q -p no:cacheprovider -k records tests/job/test_eos_crash.py tests/job/test_outages.py tests/job/test_transforms_job.py tests/job/test_certificate_rotation.py tests/job/test_failover.py $(PYTEST_ARGS)

soak: venv kafka
	$(PY) -m bench.soak $(SOAK_ARGS)

crds: venv
	$(PY) -m sparkmirror_operator.crdgen --write

dev-up: setup
	$(VENV)/bin/sparkmirror dev up

dev-down: venv
	$(VENV)/bin/sparkmirror dev down

clean:
	rm -rf $(VENV) .pytest_cache
