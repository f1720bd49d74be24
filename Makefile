# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv browser clients java-clients cluster-packages cluster cluster-stop airflow-cli cluster-cli test test-fast typecheck lint demo broker bench bench-large mutation airflow torture clean

$(STAMP): requirements.txt pyproject.toml setup.py $(wildcard storage_engine/record/*.c storage_engine/record/*.h)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -r requirements.txt
	$(BIN)/pip install --disable-pip-version-check -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

venv: $(STAMP)

# Debian's chromium for the browser tests (Playwright drives it; its own browser download cannot be used).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# The Kafka clients the wire-protocol tests drive besides the Python ones: Debian's kcat and kafkajs from npm
# (pinned in tests/server/js/package.json, installed into var/node).
KAFKAJS := var/node/node_modules/kafkajs/package.json
$(KAFKAJS): tests/server/js/package.json
	mkdir -p var/node && cp tests/server/js/package.json var/node/package.json
	cd var/node && npm install --no-audit --no-fund --silent
	touch $(KAFKAJS)

clients: $(KAFKAJS) java-clients
	@command -v kcat >/dev/null 2>&1 || { \
	  echo "installing Debian's kcat for the client tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null; }

# Kafka's own Java client (tests/server/java): Debian's JDK if javac is missing; the kafka-clients jars come from a
# pinned package of requirements.txt; the worker is compiled into var/java/ (the tests also compile it if missing).
java-clients: $(STAMP)
	@command -v javac >/dev/null 2>&1 || { \
	  echo "installing Debian's JDK for the Java client tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless >/dev/null; }
	$(BIN)/python -m tests.server.java.build

# Bytecode is cached even where the environment says not to (PYTHONDONTWRITEBYTECODE): the suite starts hundreds
# of Python processes (brokers, the CLI, Airflow), each of which would compile the repository's modules again
# (about half of a broker start's CPU), and each worker would rewrite every test module's asserts again.
# Three workers on two cores: many tests wait on other processes (brokers, Airflow, spark-submit, a browser), and a
# third worker fills those waits (pytest took 13m27s-15m18s on three workers, 21m27s on two, in fresh clones).
test: $(STAMP) browser clients cluster-packages
	$(BIN)/ruff check .
	$(BIN)/mypy
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder

typecheck: $(STAMP)
	$(BIN)/mypy

# ruff's checks of pyproject.toml's [tool.ruff] over every Python folder (lint only; nothing is reformatted).
lint: $(STAMP)
	$(BIN)/ruff check .

# Every test but the slow ones, those that need Spark or Airflow, and those whose processes die by a signal.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not spark and not airflow and not e2e and not tiered and not kills"

# Sample logs -> Airflow on SQLite -> one run of each maintenance DAG -> what changed on disk (var/ is reset).
demo: $(STAMP)
	$(BIN)/python -m include.demo

# The Kafka-protocol listener on the store (include/config/storage.yaml's listeners, PLAINTEXT://127.0.0.1:9092
# unless changed); LISTENERS=PLAINTEXT://127.0.0.1:9093 make broker for another address. Ctrl-C stops it clean.
broker: $(STAMP)
	exec $(BIN)/python -m storage_engine serve $(if $(LISTENERS),--listeners $(LISTENERS))

# Airflow (api-server, scheduler, dag-processor, triggerer; what `airflow standalone` runs) on var/airflow with the
# project's dags/ and plugins/; prints the URL and the admin login. It listens on loopback only: the api-server on
# AIRFLOW_HOST (default 127.0.0.1; AIRFLOW_HOST=0.0.0.0 make airflow opens it to the network), no log servers.
# AIRFLOW_PORT=8090 make airflow for another port; ARGS=--check starts it, checks health and login, stops it.
AIRFLOW_HOST ?= 127.0.0.1
AIRFLOW_PORT ?= 8080
# exec: Ctrl-C reaches the Python process directly, which stops every component within seconds.
airflow: $(STAMP)
	exec $(BIN)/python -m include.airflow_standalone --host $(AIRFLOW_HOST) --port $(AIRFLOW_PORT) $(ARGS)

# Airflow's own CLI against `make airflow`'s metadata DB, DAGs and settings (AIRFLOW_HOME=var/airflow, its SQLite DB):
# make airflow-cli ARGS="variables set NAME VALUE", ARGS="backfill create --dag-id log_compaction ...";
# ARGS="--print-env" prints the environment as export lines (eval "$$(make -s airflow-cli ARGS=--print-env)").
airflow-cli: $(STAMP)
	@exec $(BIN)/python -m include.airflow_cli $(ARGS)

# The same against `make cluster`'s (its scheduler's environment: PostgreSQL on the port the last `make cluster` used).
cluster-cli: $(STAMP)
	@exec $(BIN)/python -m include.airflow_cli --cluster $(ARGS)

# docker-compose.yaml's deployment as processes on this machine (no container engine needed): PostgreSQL, Redis, an
# SMTP catcher, the Spark master and worker, Airflow with the CeleryExecutor and one worker per storage host, and the
# broker; commands and settings are read from docker-compose.yaml. Prints the URLs and the login and returns;
# `make cluster-stop` stops it all (ARGS=--delete-data also deletes its metadata DB and log dirs). Loopback only;
# AIRFLOW_PORT and AIRFLOW_HOST as for `make airflow`; CLUSTER_<SERVICE>_PORT moves the others (README).
cluster-packages:
	@command -v redis-server >/dev/null 2>&1 && ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || { \
	  echo "installing Debian's postgresql and redis-server for the cluster"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql redis-server >/dev/null; }

cluster: $(STAMP) cluster-packages
	$(BIN)/python -m include.cluster up

cluster-stop: $(STAMP)
	$(BIN)/python -m include.cluster down $(ARGS)

# Every benchmark with the compiled code, then with the pure-Python fallback, then the summary table at the top of
# BENCHMARKS.md is regenerated from both (and from the last bench-large run, if any). The pure-Python pass skips
# keymap and scale: the summary has no pure-Python row for them, and one in-process build of the 10 M-key map alone
# takes minutes without the compiled kernels.
bench: $(STAMP)
	$(BIN)/python -m benchmarks
	STORAGE_ENGINE_PURE_PYTHON=1 $(BIN)/python -m benchmarks --only codec,append,fetch,load,compaction \
		--out var/bench/results-python.json
	$(BIN)/python -m benchmarks.summary --write

# The key-map build at 100 M distinct keys (in process vs spark-submit local[2]); the summary table takes its
# 100 M-key rows from this run.
# KEYS=30000000 make bench-large for another size.
bench-large: $(STAMP)
	$(BIN)/python -m benchmarks --only keymap --large $(KEYS) --out var/bench/results-large.json
	$(BIN)/python -m benchmarks.summary --write

# kill -9 torture (RELIABILITY.md): real processes on one log dir killed at random and at every protocol step,
# then reopen, verify and check every acknowledged record. TRIALS=N make torture; SOAK=600 make torture runs
# one 10-minute soak instead; THREADS=3 make torture runs the writer process as 3 writer threads with reader,
# cleaner and maintenance threads on one manager. A failing trial's log dir is kept under var/torture/failures.
# SERVER=1 TRIALS=100 make torture runs the broker trials instead: idempotent librdkafka producers while the broker is
# killed and restarted (torture/server.py).
# TXN=1 TRIALS=100 make torture runs the transaction trials: confluent-kafka consume-transform-produce workers with
# transactional producers while the broker and the workers are killed and restarted (torture/txn.py).
# TIERED=1 TRIALS=100 make torture runs the tiered-storage trials: the tier job, the appender and SeaweedFS killed while
# records are tiered and read back from offset 0 (torture/tiered.py).
TRIALS ?= 1000
torture: $(STAMP)
	$(BIN)/python -m torture --trials $(TRIALS) $(if $(SOAK),--soak $(SOAK)) $(if $(THREADS),--threads $(THREADS)) $(if $(SERVER),--server) $(if $(TXN),--txn) $(if $(TIERED),--tiered)

# Mutation testing of the engine's decision modules (MUTATION.md): every group of modules against the tests that
# pin it, 2 mutants at a time; prints killed / survived / timeout per module and fails if one scores below 90%.
# ARGS="--only retention,checkpoint" for some groups; `make test` runs a smoke run of a few mutants.
mutation: $(STAMP)
	$(BIN)/python -m mutation --fail-under 90 $(ARGS)

clean:
	rm -rf var build *.egg-info
