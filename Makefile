# Guardian — every target bootstraps .venv from a clean clone; nothing needs to be pre-installed
# except python3 (>= 3.11) with venv. `make demo` needs nothing else and no root. The system tools the
# tests drive are installed (apt-get, as root) only where missing, by the test stamps below; as another
# user each missing one is named with what skips without it.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: help venv test-tools lab-jars test unit lint demo demo-kafka bench cluster clean

help:
	@echo "make demo   - run the Guardian demo on embedded defaults (no root; DEMO_ARGS=--keep keeps its dashboard up)"
	@echo "make demo-kafka - the same acts on real Apache Kafka brokers (guardian lab; needs root for loop devices)"
	@echo "make test   - lint (ruff, mypy, import contracts) and the test suite"
	@echo "make lint   - ruff + mypy + import-linter only"
	@echo "make cluster - three local controller nodes (Raft) until Ctrl-C"
	@echo "make bench  - heavy benchmarks (print comparison tables, write JSON under out/bench)"

venv: $(STAMP)

$(STAMP): pyproject.toml
	@if ! $(BIN)/python -m pip --version >/dev/null 2>&1; then \
	  if [ -e $(VENV) ]; then echo "$(VENV) has no working pip (a set-up cut short?): making it again"; \
	  rm -rf $(VENV); fi; $(PYTHON) -m venv $(VENV); fi
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,analytics,plots,sim]'
	$(BIN)/python -c "import tiered.proto"  # generate the gRPC/protobuf code from tiered/proto/*.proto
	@touch $(STAMP)

# need COMMAND,DEBIAN-PACKAGE,WHAT-SKIPS-WITHOUT-IT: install the package only when the command is missing, only
# as root with apt-get; otherwise say what is missing and what skips
define need
	@if command -v $(1) >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing $(2) (for $(3))"; apt-get update -qq && apt-get install -y -qq $(2) \
	  || echo "WARNING: $(2) not installed: $(3) will skip"; \
	else echo "skipped: $(1) is missing and this is not root with apt-get (apt-get install $(2)): $(3) will skip"; fi
endef

# what the tests drive beyond Python: the lab's JRE, kcat, Chromium, Prometheus, Alertmanager, systemd-analyze
TEST_STAMP := $(VENV)/.test-tools
$(TEST_STAMP): $(STAMP)
	$(call need,java,default-jre-headless,the real-Kafka lab and PySpark tests)
	$(call need,kcat,kcat,kafkasim's kcat tests)
	$(call need,chromium,chromium,the dashboard's browser tests)
	$(call need,promtool,prometheus,the deploy/prometheus tests)
	$(call need,amtool,prometheus-alertmanager,the Alertmanager config test)
	$(call need,systemd-analyze,systemd,the unit verification)
	@touch $(TEST_STAMP)

test-tools: $(TEST_STAMP)

# guardian lab: Maven for the jars (and to build Guardian's RLMM plug-in, tiered/rlmm-plugin), node_exporter for
# the disks, mkfs.ext4/losetup for the loop devices
LAB_STAMP := $(VENV)/.lab-installed
RLMM_PLUGIN_SRC := tiered/rlmm-plugin/pom.xml tiered/proto/tiered_metadata.proto $(wildcard tiered/rlmm-plugin/src/main/java/guardian/tiered/rlmm/*.java)
$(LAB_STAMP): $(TEST_STAMP) kafkalab/pom.xml $(RLMM_PLUGIN_SRC)
	$(call need,mvn,maven,the lab's jars (guardian lab))
	$(call need,prometheus-node-exporter,prometheus-node-exporter,the lab's disk metrics)
	$(call need,mkfs.ext4,e2fsprogs,the lab's loop-device file systems)
	$(BIN)/guardian lab jars
	@touch $(LAB_STAMP)

lab-jars: $(LAB_STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit tests/property $(PYTEST_ARGS)

# two phases (tests/conftest.py): most modules on two xdist workers, then the real-Kafka and timing-sensitive
# ones alone; the second phase runs even when the first failed, and make fails if either did
test: lint $(LAB_STAMP)
	@GUARDIAN_REQUIRE_LAB=1 $(BIN)/python -m pytest -q -m "not bench and not lab and not serial" -n 2 --dist loadfile $(PYTEST_ARGS); a=$$?; \
	GUARDIAN_REQUIRE_LAB=1 $(BIN)/python -m pytest -q -m "(lab or serial) and not bench" $(PYTEST_ARGS); b=$$?; \
	test $$a -eq 0 -a $$b -eq 0

demo: $(STAMP)
	$(BIN)/python -m controlplane.demo $(DEMO_ARGS)

demo-kafka: $(LAB_STAMP)
	$(BIN)/python -m controlplane.demo_kafka

cluster: $(STAMP)
	$(BIN)/guardian cluster --nodes 3

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis out
