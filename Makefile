# Guardian — every target bootstraps .venv from a clean clone; nothing needs to be pre-installed
# except python3 (>= 3.11) with venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: help venv lab-jars test unit lint demo demo-kafka bench cluster clean

help:
	@echo "make demo   - run the Guardian demo on embedded defaults"
	@echo "make demo-kafka - the same acts on real Apache Kafka brokers (guardian lab; needs root for loop devices)"
	@echo "make test   - lint (ruff, mypy, import contracts) and the test suite"
	@echo "make lint   - ruff + mypy + import-linter only"
	@echo "make cluster - three local controller nodes (Raft) until Ctrl-C"
	@echo "make bench  - heavy benchmarks (print comparison tables, write JSON under out/bench)"

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@command -v java >/dev/null || (apt-get update -qq && apt-get install -y -qq default-jre-headless)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,analytics,plots]'
	$(BIN)/python -c "import tiered.proto"  # generate the gRPC/protobuf code from tiered/proto/*.proto
	command -v kcat >/dev/null || (apt-get update -qq && apt-get install -y -qq kcat) || echo "WARNING: kcat not installed (kafkasim kcat tests will skip outside CI)"
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium) || echo "WARNING: chromium not installed (dashboard browser tests will skip)"
	command -v promtool >/dev/null || (apt-get update -qq && apt-get install -y -qq prometheus) || echo "WARNING: prometheus not installed (deploy/prometheus tests will skip)"
	command -v amtool >/dev/null || (apt-get update -qq && apt-get install -y -qq prometheus-alertmanager) || echo "WARNING: alertmanager not installed (its config test will skip)"
	command -v systemd-analyze >/dev/null || (apt-get update -qq && apt-get install -y -qq systemd) || echo "WARNING: systemd not installed (unit verification will skip)"
	@touch $(STAMP)

# guardian lab: Maven for the jars, node_exporter for the disks, mkfs.ext4/losetup for the loop devices
LAB_STAMP := $(VENV)/.lab-installed
$(LAB_STAMP): $(STAMP) kafkalab/pom.xml
	command -v mvn >/dev/null || (apt-get update -qq && apt-get install -y -qq maven)
	command -v prometheus-node-exporter >/dev/null || (apt-get update -qq && apt-get install -y -qq prometheus-node-exporter)
	command -v mkfs.ext4 >/dev/null || (apt-get update -qq && apt-get install -y -qq e2fsprogs)
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
	$(BIN)/python -m controlplane.demo

demo-kafka: $(LAB_STAMP)
	$(BIN)/python -m controlplane.demo_kafka

cluster: $(STAMP)
	$(BIN)/guardian cluster --nodes 3

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis out
