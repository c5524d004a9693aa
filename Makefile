# The template repository. `make demo` serves a generated service; `make test` runs every test.
# Both set up what they need first (a virtual environment in .venv, tritonserver on first use).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DEMO_DIR := build/demo
DEMO_PROJECT := $(DEMO_DIR)/my-service
# The demo service's HTTP port; gRPC and metrics take the next two (make demo DEMO_PORT=9000).
DEMO_PORT ?= 8000
# `make test` runs the runtime's tests on these Pythons too, each in its own venv (.venv-py3.10), built by make.
# EXTRA_PYTHONS= runs on $(PYTHON) alone. 3.12 gets numpy 1.26, as NGC's tritonserver images (Python 3.12, numpy 1.x).
EXTRA_PYTHONS ?= 3.10 3.12 3.13 3.14
# numpy of each extra Python's venv, when it must differ from the newest (make test NUMPY_3.12=).
NUMPY_3.12 ?= numpy>=1.26,<2
# Python X.Y for those venvs: pyenv's build, else pythonX.Y on PATH.
find_python = $(firstword $(wildcard $(HOME)/.pyenv/versions/$(1).*/bin/python) $(shell command -v python$(1)))
# What runs an extra Python's commands: nothing (the host's), or for a 3.14 the host lacks, .ci/forky: Debian forky's
# python3.14 in a chroot (build/forky, made on first use; needs root).
in_chroot = $(if $(filter 3.14,$(1)),$(if $(call find_python,$(1)),,$(CURDIR)/.ci/forky))
# The extra Pythons' installs take the backend library .venv's install built (no build in a chroot, whose library
# would not load on the host); their runs find it up to date, and leave out what does not depend on their Python,
# which the first run checks: the Rust suite (cargo test, ASan, clippy), the compatibility programs run on
# PyTriton 0.7 (in its own venv), the end-to-end trace (Triton's exporter waits seconds per span batch) and the
# Triton models served beside the callables (their model.py runs in the Python backend stub's own Python; the
# folder checks are unit tests, which run on every Python).
NATIVE_LIBRARY := $(CURDIR)/runtime/native/target/release/libtriton_tritonrt.so
EXTRA_PYTEST_ARGS ?= --ignore=tests/native/test_rust_suite.py --ignore=tests/integration/test_tracing.py \
	--ignore=tests/integration/test_triton_models.py --ignore=tests/integration/test_bls.py -k "not pytriton-0.7"
# checkov, for the generated projects' k8s tests, in a venv of its own: it pins many packages.
CHECKOV_VENV := .venv-checkov
# PyTriton 0.7 in a venv of its own (its pins differ from ours): the compatibility suite runs its programs on it too,
# and make bench measures it.
PYTRITON_VENV := bench/.venv-pytriton

.DEFAULT_GOAL := help
.PHONY: help venv install-server deploy-tools rust-toolchain pytriton test test-setup test-extra-pythons lint lock demo bench chaos gpu-pack gpu-check clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  make %-15s %s\n", $$1, $$2}'

venv: $(VENV)/.installed  ## .venv with the runtime (editable) and the test tools of requirements-dev.txt

# The runtime's editable install builds its Rust backend: Debian's cargo is installed first when it is missing
# (as root, when apt has one new enough for the crate's rust-version), else make says what to run.
$(VENV)/.installed: runtime/pyproject.toml requirements-dev.txt
	$(PYTHON) runtime/native/debian_cargo.py ensure
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e "runtime[test]" -r requirements-dev.txt
	touch $@

install-server: venv  ## download tritonserver into the user cache (otherwise done on first use)
	$(VENV)/bin/tritonrt install-server

# HAProxy: the balancer of the generated rollout test (Debian's is in /usr/sbin, off a user's PATH).
deploy-tools: $(CHECKOV_VENV)/.installed  ## the generated k8s tests' tools: promtool + prometheus, haproxy (apt), checkov
	@if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 && \
		{ command -v haproxy || test -x /usr/sbin/haproxy; } >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "Installing Debian's prometheus (promtool, prometheus) and haproxy packages for the k8s tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			prometheus haproxy >/dev/null; \
	else \
		echo "promtool, prometheus or haproxy not found: the k8s tests that need them skip" \
			"(sudo apt-get install prometheus haproxy)" >&2; \
	fi
	@command -v kubectl >/dev/null 2>&1 || echo "kubectl not found: the k8s tests skip (https://kubernetes.io/docs/tasks/tools/)" >&2

rust-toolchain:  ## the backend's rust-version proven: Debian 13's cargo in a chroot, built once into ~/.cache (root)
	$(PYTHON) runtime/native/debian_cargo.py chroot

$(CHECKOV_VENV)/.installed:
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet "checkov>=3.2,<4"
	touch $@

pytriton: $(PYTRITON_VENV)/.installed  ## PyTriton 0.7 in bench/.venv-pytriton: the compatibility suite's reference, make bench's

$(PYTRITON_VENV)/.installed:
	test -x $(PYTRITON_VENV)/bin/python || $(PYTHON) -m venv $(PYTRITON_VENV)
	$(PYTRITON_VENV)/bin/python -m pip install --quiet "nvidia-pytriton==0.7.0" "numpy<2"
	touch $@

# The runtime and its test tools on Python X.Y (the server comes on first use), with the library .venv's install built.
$(VENV)-py%/.installed: runtime/pyproject.toml $(VENV)/.installed
	$(if $(call in_chroot,$*),$(call in_chroot,$*) --build)
	@python="$(or $(call find_python,$*),$(if $(call in_chroot,$*),$(call in_chroot,$*) python$*))"; \
	test -n "$$python" || { echo "make: no Python $* found (pyenv's $(HOME)/.pyenv/versions/$*.*, python$* on PATH): \
		install it (pyenv install $*) or leave it out of EXTRA_PYTHONS (make test EXTRA_PYTHONS=)" >&2; exit 1; }; \
	echo "==> $(VENV)-py$*: the runtime's tests on $$python"; \
	test -f $(VENV)-py$*/pyvenv.cfg || $$python -m venv $(VENV)-py$*
	TRITONRT_NATIVE_LIBRARY=$(NATIVE_LIBRARY) $(call in_chroot,$*) $(VENV)-py$*/bin/python -m pip install --quiet \
		-e "runtime[test]" $(if $(NUMPY_$*),"$(NUMPY_$*)")
	touch $@

# The server install-server puts in the user cache serves every Python: the extra Pythons' tests install none.
# The compatibility suite runs each program on PyTriton 0.7 too (TRITONRT_COMPAT_PYTRITON_PYTHON).
test: export TRITONRT_COMPAT_PYTRITON_PYTHON = $(CURDIR)/$(PYTRITON_VENV)/bin/python
# After loadtests/tests, three lanes side by side: the extra Pythons' runs (build/test-extra-pythons.log), the
# tests of tests/ that build a whole project's image or venv from nothing (TESTS_APART: build/test-apart.log) and
# the rest of tests/; each lane's output is shown when it ends. Those suites mostly wait (on servers, pip, docker
# builds): one after another, the machine's two cores were busy 41% of the time (a CI run of 2026-11-27: tests/
# alone took 35 minutes). loadtests/tests runs alone before them: its tuning runs measure real services, which a
# machine busy with other suites skews.
TESTS_APART := tests/test_container.py tests/test_from_nothing.py tests/test_real_model.py
test: test-setup $(EXTRA_PYTHONS:%=$(VENV)-py%/.installed)  ## every test: runtime/tests (on each Python), loadtests/tests, tests/
	@echo "==> $$(date -u +%T) the runtime's tests on $(PYTHON)"
	cd runtime && ../$(PY) -m pytest --durations=15
	@echo "==> $$(date -u +%T) loadtests/tests"
	$(PY) -m pytest --durations=10 loadtests/tests
	@mkdir -p build; echo "==> $$(date -u +%T) the runtime's tests on Python $(EXTRA_PYTHONS), $(TESTS_APART), and tests/"; \
	$(MAKE) --no-print-directory test-extra-pythons > build/test-extra-pythons.log 2>&1 & extra=$$!; \
	$(PY) -m pytest --durations=10 $(TESTS_APART) > build/test-apart.log 2>&1 & apart=$$!; \
	$(PY) -m pytest --durations=20 tests $(TESTS_APART:%=--ignore=%); status=$$?; \
	echo "==> $$(date -u +%T) tests/ ended"; \
	wait $$apart; apart_status=$$?; \
	echo "==> $$(date -u +%T) $(TESTS_APART) (build/test-apart.log):"; \
	cat build/test-apart.log; \
	wait $$extra; extra_status=$$?; \
	echo "==> $$(date -u +%T) the runtime's tests on Python $(EXTRA_PYTHONS) (build/test-extra-pythons.log):"; \
	cat build/test-extra-pythons.log; test $$status = 0 && test $$apart_status = 0 && test $$extra_status = 0

# What make test needs besides .venv, mostly downloads, in two lanes side by side: one lane the users of apt and
# debootstrap, one after another (apt-get holds a lock: two at once fail), the other the pip installs
# (install-server, PyTriton, the extra Pythons' venvs on the host's Pythons). A chroot's venv (forky's 3.14)
# comes after both, from make test: it installs the runtime editable, as the pip lane does, in the same folder.
test-setup: venv  ## make test's prerequisites (the server, tools, venvs, chroots), fetched two lanes at a time
	@echo "==> $$(date -u +%T) make test's prerequisites, two lanes side by side"
	@$(MAKE) --no-print-directory install-server pytriton \
		$(foreach version,$(EXTRA_PYTHONS),$(if $(call in_chroot,$(version)),,$(VENV)-py$(version)/.installed)) & pip=$$!; \
	$(MAKE) --no-print-directory deploy-tools rust-toolchain; apt=$$?; \
	$(foreach version,$(EXTRA_PYTHONS),$(if $(call in_chroot,$(version)),test $$apt != 0 || { $(call in_chroot,$(version)) --build; apt=$$?; };)) \
	wait $$pip; pip=$$?; test $$pip = 0 && test $$apt = 0

# One Python after another: they share runtime/'s build folder (the packaging tests build wheels there).
test-extra-pythons: $(EXTRA_PYTHONS:%=$(VENV)-py%/.installed)  ## the runtime's tests on each Python of EXTRA_PYTHONS
	@$(foreach version,$(EXTRA_PYTHONS),echo "==> $$(date -u +%T) the runtime's tests on Python $(version)" && \
		(cd runtime && $(call in_chroot,$(version)) ../$(VENV)-py$(version)/bin/python -m pytest -p no:cacheprovider \
			$(EXTRA_PYTEST_ARGS)) &&) true

# Each generated project's own `make lint` runs in tests/test_bake.py (make test), once per supported variant.
lint: venv  ## ruff check and format check of the repository's Python code; mypy on the runtime, the hooks, .ci
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy --config-file runtime/pyproject.toml runtime/tritonrt
	$(PY) -m mypy --strict --config-file runtime/pyproject.toml --exclude 'hooks/(pre|post)_gen_project\.py' hooks .ci

lock: venv  ## update the generated project's lock ({{cookiecutter.project}}/requirements.txt) with its make lock (PyPI)
	$(PY) .ci/template_lock.py --python $(abspath $(PY))

demo: install-server  ## bake the defaults into build/demo, serve on a local tritonserver, send a request, stop
	rm -rf $(DEMO_DIR)
	$(PY) -m cookiecutter --no-input --output-dir $(DEMO_DIR) .
	$(MAKE) -C $(DEMO_PROJECT) install EXTRAS=
	@cd $(DEMO_PROJECT) && \
	echo "==> Starting the service (python -m my_service)"; \
	MY_SERVICE_HTTP_PORT=$(DEMO_PORT) MY_SERVICE_GRPC_PORT=$$(($(DEMO_PORT) + 1)) \
		MY_SERVICE_METRICS_PORT=$$(($(DEMO_PORT) + 2)) .venv/bin/python -m my_service & pid=$$!; \
	trap 'kill -TERM $$pid 2>/dev/null; wait $$pid' EXIT; \
	until .venv/bin/python -c "import urllib.request as r; r.urlopen('http://localhost:$(DEMO_PORT)/v2/health/ready', timeout=2)" 2>/dev/null; do \
		kill -0 $$pid 2>/dev/null || { echo "demo: the service exited before it was ready" >&2; exit 1; }; \
		sleep 1; \
	done; \
	echo "==> Sending the example request through the generated client"; \
	.venv/bin/python -m my_service.client --url http://localhost:$(DEMO_PORT) || exit 1; \
	echo "==> Stopping the service (SIGTERM)"; \
	trap - EXIT; kill -TERM $$pid; wait $$pid && echo "==> The service stopped cleanly (exit status 0)"

bench: install-server pytriton  ## proxy overhead, the worker's and the backend's CPU by step, a CPU-bound model, a BLS pipeline: plain Python backend vs tritonrt (threads, processes) vs PyTriton
	bench/setup.sh
	$(PY) bench/run.py
	$(PY) bench/worker_steps.py
	$(PY) bench/backend_steps.py
	$(PY) bench/cpu_bound.py
	$(PY) bench/pipeline.py

# CHAOS_ARGS: --duration 1800 for the 30-minute soak; --interval, --window, --clients, --faults (python bench/chaos.py -h).
chaos: install-server  ## a service with worker processes under checked HTTP+gRPC load while faults come in turn (60 s)
	$(PY) bench/chaos.py $(CHAOS_ARGS)

# The GPU check's carry folder: what a GPU machine without network needs (make gpu-pack writes it, < 60 MiB).
GPU_CARRY ?= build/gpu-carry

gpu-pack: venv  ## pack tritonserver and the packages a GPU machine lacks into build/gpu-carry (needs PyPI)
	$(PY) bench/gpu_check.py pack --out $(GPU_CARRY)

# Runs with the machine's python3 (torch with CUDA), offline: GPU_CHECK_ARGS=--allow-cpu for a CPU dry run.
gpu-check:  ## from build/gpu-carry, offline: bake a pytorch service, serve it on the GPU, check CUDA and values, measure
	python3 bench/gpu_check.py run --carry $(GPU_CARRY) $(GPU_CHECK_ARGS)

clean:  ## remove build/ (the demo) and caches
	rm -rf build .pytest_cache .ruff_cache .mypy_cache
