# gpu_platform: `make demo` and `make test` work on a fresh machine with nothing installed by hand.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export GPU_PLATFORM_HOME ?= $(CURDIR)/var
DEMO_HOME := $(CURDIR)/.demo
# The demo runs CPU programs on a machine that may have no GPU: it declares a simulated local
# inventory as large as the policy's pool (the executor logs that it is not NVML).
DEMO_GPUS ?= 64
# Days of generated history (ending yesterday) and how many of the newest are priced before the
# UI opens (all of them: ~2.5 min here; any older ones by a backfill the UI runs, which competes
# with the demo's live workloads for the CPUs and is far slower).
DEMO_DAYS ?= 30
DEMO_PRICE_DAYS ?= $(DEMO_DAYS)
DEMO_PORT ?= 3000
DEMO_ENV = DAGSTER_HOME=$(DEMO_HOME)/dagster_home GPU_PLATFORM_HOME=$(DEMO_HOME) GPU_PLATFORM_LOCAL_GPUS=$(DEMO_GPUS)
PYTEST_ARGS ?=

.PHONY: install demo demo-seed ui-check test lint bench test-gpu test-cluster clean image lock

# setup.py builds the DCGM parser's compiled scan (optional: without a C compiler the numpy scan is used)
$(STAMP): pyproject.toml setup.py gpu_platform/finops/feeds/_dcgm_scan.c
	@$(PYTHON) -c "import sys; assert sys.version_info >= (3, 11), sys.version" || { echo "needs Python 3.11 (set PYTHON=)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

test: $(STAMP) lint
	./scripts/with-postgres.sh $(VENV)/bin/pytest -q -n 2 --dist loadfile $(PYTEST_ARGS)

test-gpu: $(STAMP)
	GPU_PLATFORM_REQUIRE_GPU=1 $(VENV)/bin/pytest -q -m gpu tests

test-cluster: $(STAMP)
	GPU_PLATFORM_REQUIRE_CLUSTER=1 $(VENV)/bin/pytest -q -m cluster tests

bench: $(STAMP)
	$(PY) bench/run_all.py

demo-seed: $(STAMP)
	$(DEMO_ENV) $(VENV)/bin/gpu-platform demo seed --days $(DEMO_DAYS) --price-days $(DEMO_PRICE_DAYS) \
		--project-config $(CURDIR)/gpu-platform.yaml

# `demo run` supervises `dagster dev`: Ctrl-C stops it and all its children within seconds
demo: demo-seed
	$(DEMO_ENV) $(VENV)/bin/gpu-platform demo run --host 127.0.0.1 --port $(DEMO_PORT)

# The demo UI in headless Chromium (Debian's chromium + chromedriver, installed when missing; needs
# root for apt-get) driven by selenium: screenshots and page/GraphQL checks in var/ui-check/.
ui-check: $(STAMP)
	@test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; }
	$(PY) -c "import selenium" 2>/dev/null || $(PY) -m pip install --quiet -e '.[dev,ui]'
	$(PY) scripts/ui_check.py --out $(CURDIR)/var/ui-check

clean:
	rm -rf $(VENV) var .demo .pytest_cache .ruff_cache

# The code-location image (Dockerfile; docs/image.md) with the first of docker, podman or buildah
# found (CONTAINER_TOOL= picks one). The package comes from a wheel built in the image and its
# dependencies from requirements/lock.txt with hashes; the image is labelled with the commit.
CONTAINER_TOOL ?= $(firstword $(foreach t,docker podman buildah,$(shell command -v $(t) 2>/dev/null)))
SOURCE_COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
IMAGE ?= gpu-platform:$(shell git rev-parse --short=12 HEAD 2>/dev/null || echo dev)
IMAGE_BUILD_ARGS ?=

image:
	@tool='$(CONTAINER_TOOL)'; \
	if [ -z "$$tool" ]; then echo "make image: needs docker, podman or buildah on PATH (or CONTAINER_TOOL=/path/to/one); none found" >&2; exit 1; fi; \
	if ! command -v "$$tool" >/dev/null 2>&1; then echo "make image: CONTAINER_TOOL=$$tool is not an executable" >&2; exit 1; fi; \
	if [ "$$(basename "$$tool")" = docker ] && ! "$$tool" info >/dev/null 2>&1; then \
	  echo "make image: $$tool reaches no Docker daemon ('docker info' fails): start one, or set CONTAINER_TOOL to podman or buildah" >&2; exit 1; fi; \
	if [ -n "$$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then \
	  echo "make image: uncommitted changes: the image holds the working tree, its label names $(SOURCE_COMMIT)" >&2; fi; \
	set -x; "$$tool" build -f Dockerfile -t '$(IMAGE)' --build-arg 'SOURCE_COMMIT=$(SOURCE_COMMIT)' $(IMAGE_BUILD_ARGS) .

# requirements/lock.txt: every run-time dependency of pyproject.toml pinned with hashes for the
# image (Python 3.11, linux x86_64); requirements/build-lock.txt: the wheel build's [build-system]
# requires. Kept versions are preferred; `make lock UPGRADE=1` moves every pin to the newest allowed.
# tests/packaging/test_lock.py fails when either is out of date with pyproject.toml.
UV_VERSION ?= 0.13.9
LOCK_FLAGS = --quiet --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
	--custom-compile-command "make lock" $(if $(UPGRADE),--upgrade)

lock: $(STAMP)
	@$(VENV)/bin/uv --version 2>/dev/null | grep -q '^uv $(UV_VERSION)\( \|$$\)' || $(PY) -m pip install --quiet 'uv==$(UV_VERSION)'
	mkdir -p requirements
	$(VENV)/bin/uv pip compile pyproject.toml $(LOCK_FLAGS) -o requirements/lock.txt
	$(PY) -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['build-system']['requires']))" \
		| $(VENV)/bin/uv pip compile - $(LOCK_FLAGS) -o requirements/build-lock.txt
