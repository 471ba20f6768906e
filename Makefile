# The commands README.md names. Everything installs into .venv from PyPI; nothing global.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The extras `make install` adds; every other target installs just the extras it needs (see the stamps below).
EXTRAS ?= test
# The pytest-xdist workers `make test` and `make test-fast` spread the test files over, whole files per worker so
# a module's cluster or server starts once. The suite mostly waits (on JVMs, brokers, polls): on 2 cores two
# workers take 58 % of one's time (1,196 s against 2,073 s). TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2

.PHONY: install example wheel test test-fast kafka-jars db-bench yarn-jars blob-emulators kinesalite oldest-pyspark lint docs bench bench-peers clean bench-latency

# One stamp per set of extras, so `make example` installs only the package and `make test` afterwards adds the
# test extra on top of the same venv. "base" is the package alone. A stamp older than pyproject.toml reinstalls.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(BIN)/.installed-base: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(BIN)/.installed-%: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[$*]"
	touch $@ $(BIN)/.installed-base

install: $(BIN)/.installed-$(EXTRAS)

## Run the example job end to end on Spark local mode with the embedded defaults.
example: $(BIN)/.installed-base
	cd examples/pageviews && ../../$(BIN)/python generate.py --events 20000 \
	  && ../../$(BIN)/millstream run job.yaml \
	  && ../../$(BIN)/python show.py

## Build the wheel users install (`pip install "dist/millstream-<version>-py3-none-any.whl[kafka]"`) into dist/.
wheel: $(BIN)/.installed-base
	$(BIN)/pip wheel -q --no-deps --wheel-dir dist .

## Run the whole test suite (unit, in-process, Spark local mode, standalone and mini YARN clusters, a real Kafka
## broker, kinesalite, S3 and Azure blob emulators). Installs what the servers need first (cached after the first run).
test: $(BIN)/.installed-test kafka-jars yarn-jars blob-emulators kinesalite oldest-pyspark db-bench
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25

## Run only the tests that start no JVM and no server (tests/conftest.py marks the others spark / integration).
test-fast: $(BIN)/.installed-test
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not spark and not integration"

## Download the Kafka broker JARs the integration tests start (Maven Central via ~/.m2, cached; see tools/kafka).
kafka-jars: $(BIN)/.installed-test
	$(BIN)/python -m tests.integration.kafka_broker fetch

## Download Hadoop's mini YARN cluster JARs the spark-submit tests on YARN start (Maven Central via ~/.m2, cached; see tools/yarn).
yarn-jars: $(BIN)/.installed-test
	$(BIN)/python -m tests.spark.yarn fetch

## Install the blob store emulators the state integration tests start (Azurite with npm into a cache; moto comes with the test extra).
blob-emulators: $(BIN)/.installed-test
	$(BIN)/python -m tests.integration.blob_emulators fetch

## Build a venv with the oldest pyspark pyproject.toml allows, for the test that runs jobs on it (PyPI, cached;
## see tests/packaging/oldest_pyspark.py).
oldest-pyspark: $(BIN)/.installed-test
	$(BIN)/python -m tests.packaging.oldest_pyspark fetch

## Unpack RocksDB's own db_bench (Debian's rocksdb-tools, apt-get download: no root; cached), the native reference
## benchmarks/scale.py runs beside each restore (benchmarks/engine_fill.py).
db-bench: $(BIN)/.installed-test
	$(BIN)/python -m benchmarks.engine_fill fetch

## Install kinesalite, the Kinesis API emulator the Kinesis tests and benchmark start (npm ci into a cache; see tools/kinesis).
kinesalite: $(BIN)/.installed-test
	$(BIN)/python -m tests.integration.kinesis.emulator fetch

lint: $(BIN)/.installed-test
	$(BIN)/ruff check millstream tests benchmarks examples tools/docs
	$(BIN)/ruff format --check millstream tests benchmarks examples tools/docs
	$(BIN)/mypy
	$(BIN)/lint-imports

## Build the documentation site into site/ (mkdocs.yml); --strict fails on broken links and missing references.
docs: $(BIN)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

bench: $(BIN)/.installed-test
	$(BIN)/python -m benchmarks.passthrough_log
	$(BIN)/python -m benchmarks.kafka_passthrough
	$(BIN)/python -m benchmarks.state_restore
	$(BIN)/python -m benchmarks.commit_pause
	$(BIN)/python -m benchmarks.stateful_throughput
	$(BIN)/python -m benchmarks.kinesis_passthrough

## The peer benchmark (docs/performance.md): millstream against the raw client, Quix Streams, Bytewax, Faust and
## Spark Structured Streaming on one broker; the peers install into their own venvs under ~/.cache/millstream/peers.
bench-peers: $(BIN)/.installed-bench kafka-jars
	$(BIN)/python -m benchmarks.peers $(PEERS_ARGS)

clean:
	rm -rf $(VENV) examples/*/.millstream .pytest_cache site

## End-to-end latency (benchmarks/latency.py): a fixed-rate producer, the raw confluent-kafka loop and millstream
## (default, tuned, exactly-once, Spark) in turn, a read_committed reader; p50 to max, and a plot (matplotlib
## comes with the bench extra). LATENCY_ARGS: e.g. --rate 10000 --no-spark --set task.commit.ms=1000.
bench-latency: $(BIN)/.installed-bench kafka-jars
	$(BIN)/python -m benchmarks.latency $(LATENCY_ARGS)
