# Every target installs what it needs into .venv/ first, so each works on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.demo-installed
# The native extension's sources: a change rebuilds it (pip install -e . runs maturin again).
NATIVE_SOURCES := native/Cargo.toml native/Cargo.lock $(wildcard native/src/*.rs)

.PHONY: install kafka promtool kustomize image-tools image demo jobs-demo test bench bench-quick bench-scale bench-spark lint unit integration smoke docs docs-serve wheel clean

# Everything: the tests, the Spark jobs and the documentation site.
$(STAMP): pyproject.toml $(NATIVE_SOURCES)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,spark,docs]"
	touch $(STAMP) $(DEMO_STAMP)

# The demo alone: the product and the embedded broker (no Spark, no test tools).
$(DEMO_STAMP): pyproject.toml $(NATIVE_SOURCES)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[embedded]"
	touch $(DEMO_STAMP)

install: $(STAMP) kafka promtool kustomize

## Apache Kafka's jars (broker, tools, both MirrorMakers) from Maven Central into ~/.cache/replicator
## (once; later runs are offline). Needs Java 17+ and Maven 3.8+.
kafka: $(STAMP)
	$(BIN)/python -m replicator.devtools.apache_kafka
	$(BIN)/python -m replicator.devtools.mirror_makers

## Prometheus' promtool 2.42.0 (the alert rules' checks and unit tests) into ~/.cache/replicator
## (once): Debian's prometheus package where apt offers that release (seconds), else a Go build.
promtool: $(STAMP)
	$(BIN)/python -m replicator.devtools.promtool

## kustomize, pinned (the Kubernetes overlays rendered as an operator renders them) into
## ~/.cache/replicator (once): a Go build from the Go module proxy, else kubectl's own.
kustomize: $(STAMP)
	$(BIN)/python -m replicator.devtools.manifests

## A container engine for the images where none is present: podman (with runc, buildah, and
## catatonit for the pods of `podman kube play`) and mmdebstrap, which makes the local base
## image where the registry cannot be reached, from Debian's packages (needs root and apt; once).
image-tools:
	@if command -v docker > /dev/null 2>&1 && docker info > /dev/null 2>&1; then exit 0; fi; \
	if command -v podman > /dev/null && command -v runc > /dev/null && command -v mmdebstrap > /dev/null && command -v catatonit > /dev/null; then exit 0; fi; \
	echo "installing podman, runc, buildah, catatonit and mmdebstrap from Debian's packages"; \
	apt-get update -q > /dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends podman runc buildah catatonit mmdebstrap uidmap slirp4netns fuse-overlayfs > /dev/null

## Both images (the sidecar, the Spark jobs'), built from deploy/Dockerfile with docker or podman;
## prints the bases used, sizes, labels, the packages inside and the time from run to /readyz
## beside two Apache Kafka clusters (local JVMs: the jars of `make kafka`).
image: $(STAMP) kafka image-tools
	$(BIN)/python -m replicator.devtools.images

## The embedded two-datacenter demo: two local brokers, two replicators, live traffic.
## Afterwards the command is .venv/bin/replicator (or `source .venv/bin/activate`).
demo: $(DEMO_STAMP)
	$(BIN)/replicator demo

## The whole test suite: static checks, unit tests, integration tests on Apache Kafka (on the
## native data path), then the smoke subset on the Python data path (the reference), then on the
## embedded broker (the demo's).
test: lint $(STAMP) kafka promtool kustomize image-tools
	$(BIN)/pytest -q -n 2 --dist worksteal --durations=25
	REPLICATOR_TEST_DATA_PATH=python $(BIN)/pytest -q -n 2 --dist worksteal -m smoke tests/integration
	REPLICATOR_TEST_BROKER=embedded $(BIN)/pytest -q -n 2 --dist worksteal -m smoke tests/integration

## Throughput, latency and memory, side by side with a naive mirror and a batch-copy ceiling.
jobs-demo: $(STAMP)
	$(BIN)/replicator demo --spark

bench: $(STAMP) kafka
	$(BIN)/python -m benchmarks.run

bench-quick: $(STAMP) kafka
	$(BIN)/python -m benchmarks.run --quick

## The same records over 24 to 6,000 partitions (the replicator and MirrorMaker 2), then 1, 2 and
## 3 instances, then the steady state of both: latency and CPU at a fixed rate; then 3 instances
## under that load while one leaves and one joins, every record counted (benchmarks/scale.py).
bench-scale: $(STAMP) kafka
	$(BIN)/python -m benchmarks.scale

bench-spark: $(STAMP) kafka
	$(BIN)/python -m benchmarks.spark

lint: $(STAMP)
	$(BIN)/ruff check replicator tests benchmarks examples
	$(BIN)/ruff format --check replicator tests benchmarks examples
	$(BIN)/mypy
	$(BIN)/lint-imports
	cargo fmt --manifest-path native/Cargo.toml --check
	cargo clippy --manifest-path native/Cargo.toml --release --quiet -- -D warnings

unit: $(STAMP) promtool kustomize
	$(BIN)/pytest -q -m "not integration"

integration: $(STAMP) kafka
	$(BIN)/pytest -q -n 2 --dist worksteal tests/integration

## The integration tests marked smoke, on the embedded broker (no JVM).
smoke: $(STAMP)
	REPLICATOR_TEST_BROKER=embedded $(BIN)/pytest -q -n 2 --dist worksteal -m smoke tests/integration

## The documentation site, built strictly into site/ (a broken link or a missing page fails).
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	$(BIN)/mkdocs serve

## The release wheel, its native extension (native/, Rust: needs cargo) compiled, into dist/
## (pip runs the maturin build backend pyproject.toml pins).
wheel: $(STAMP)
	$(BIN)/pip wheel --quiet --no-deps --wheel-dir dist .

clean:
	rm -rf $(VENV) site .pytest_cache .mypy_cache .ruff_cache .import_linter_cache native/target dist replicator/_native*.so
