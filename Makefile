# The two set-up commands of the README: `make demo` (the main job) and `make test` (the tests).
# Both create the virtualenv, install the pinned dependencies and start the local Kafka broker
# themselves; a broker they started is stopped again at the end.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: venv test unit faults demo kafka-up kafka-down clean k8s-e2e

venv: $(STAMP)
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[worker,planner,plots,models,test]'
	touch $(STAMP)

# Unit tests and integration tests against the real broker (started here unless one already runs).
test: venv
	@started=0; \
	if [ -z "$$SLIPSTREAM_BOOTSTRAP" ] && ! $(BIN)/slipstream kafka status >/dev/null 2>&1; then \
	  $(BIN)/slipstream kafka up || exit 1; started=1; fi; \
	$(BIN)/python -m pytest -q; rc=$$?; \
	if [ $$started = 1 ]; then $(BIN)/slipstream kafka down; fi; \
	exit $$rc

unit: venv
	$(BIN)/python -m pytest -q tests/unit

# The fault suite alone (also part of `make test`): every chaos case under exactly-once on a broker of
# its own (127.0.0.1:19200), and one broker of three killed on a cluster of its own (19210..19215);
# the tests start and stop those brokers, the shared one is not needed.
faults: venv
	$(BIN)/python -m pytest -q tests/integration/test_chaos.py

demo: venv
	$(BIN)/slipstream demo

# The pipeline on a real single-node Kubernetes cluster built here (as root; not in .ci/run: the first
# build of the Kubernetes binaries alone takes longer than CI's budget). docs/kubernetes.md, section 10.
k8s-e2e: venv
	$(BIN)/python -c 'import kubernetes' 2>/dev/null || $(BIN)/pip install -q -c constraints.txt kubernetes
	deploy/k8s/e2e.sh

kafka-up: venv
	$(BIN)/slipstream kafka up

kafka-down:
	$(BIN)/slipstream kafka down

clean:
	-$(BIN)/slipstream kafka down
	rm -rf .state reports
