# aqmchain: `make demo` and `make test` on a fresh Debian 12 machine (as root, or with sudo).
# System libraries come from Debian packages (installed only when missing), Python
# packages from PyPI into .venv (installed only when missing).

PYTHON   ?= python3
VENV     := .venv
VPY      := $(VENV)/bin/python
JOBS     ?= 2
APT_PKGS := g++ make cmake ninja-build pkg-config libsuitesparse-dev libarpack2-dev libeigen3-dev libgtest-dev libopenblas0-pthread
# nbclient, ipykernel and nbformat: the tests (and the docs site) execute the notebooks in a real kernel
PY_MODS  := numpy scipy pybind11 scikit_build_core pytest matplotlib hypothesis dask distributed pandas tqdm nbclient ipykernel nbformat dpkt
PIP_PKGS := numpy scipy pybind11 scikit-build-core pytest matplotlib hypothesis dask distributed pandas tqdm nbclient ipykernel nbformat dpkt
# the documentation site (`make docs`, part of `make test`): import names and PyPI names
DOC_MODS := mkdocs material mkdocstrings mkdocstrings_handlers.python
DOC_PKGS := mkdocs mkdocs-material 'mkdocstrings[python]'
# `make notebooks` only (never for `make test`); the kernel (ipykernel) is in PIP_PKGS
NB_PKGS  := jupyterlab

.PHONY: all deps sysdeps pydeps docdeps ns3deps build build-py build-cpp test test-cpp test-py docs notebooks sanitize demo bench clean

all: build

sysdeps:
	@missing=""; \
	for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	$(PYTHON) -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null || missing="$$missing python3-dev"; \
	$(PYTHON) -c 'import ensurepip, venv' >/dev/null 2>&1 || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install:$$missing"; \
	  SUDO=""; [ "$$(id -u)" -eq 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi

pydeps: sysdeps
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	@$(VPY) -c 'import $(shell echo $(PY_MODS) | tr " " ",")' >/dev/null 2>&1 || \
	  { echo "pip install: $(PIP_PKGS)"; $(VPY) -m pip install -q --upgrade pip && $(VPY) -m pip install -q $(PIP_PKGS); }

deps: sysdeps pydeps

# ns-3 3.44 (the PyPI wheel `ns3`: headers and shared libraries, manylinux x86_64, CPython 3.11) for
# the validation test against ns-3's own RedQueueDisc (tests/python/simulation/test_ns3.py, which
# compiles validation/ns3/red_harness.cc against it).  --no-deps: the harness links the C++
# libraries; the wheel's Python bindings (cppyy) are not used.  A failed install does not stop
# `make test`: the test is then skipped, and both this line on stderr and pytest's summary say so.
NS3_PKG  := ns3==3.44.*
ns3deps: pydeps
	@$(VPY) -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("ns3") is None)' 2>/dev/null || \
	  { echo "pip install: $(NS3_PKG)"; $(VPY) -m pip install -q --no-deps '$(NS3_PKG)' || \
	    echo "WARNING: the ns3 wheel ($(NS3_PKG)) could not be installed from PyPI: the ns-3 validation test (tests/python/simulation/test_ns3.py) will be SKIPPED" >&2; }

build-py: deps
	$(VPY) -m pip install -q --no-build-isolation --no-deps .

build-cpp: sysdeps
	cmake -S . -B build/cpp -G Ninja -DCMAKE_BUILD_TYPE=Release -DAQM_BUILD_TESTS=ON >/dev/null
	cmake --build build/cpp -j $(JOBS)

build: build-py build-cpp

test-cpp: build-cpp
	ctest --test-dir build/cpp --output-on-failure --no-tests=error -j $(JOBS)

test-py: build-py ns3deps
	$(VPY) -m pytest tests/python

test: test-cpp test-py docs

docdeps: pydeps
	@$(VPY) -c 'import $(shell echo $(DOC_MODS) | tr " " ",")' >/dev/null 2>&1 || \
	  { echo "pip install: $(DOC_PKGS)"; $(VPY) -m pip install -q $(DOC_PKGS); }

# The documentation site into build/site; warnings are errors (mkdocs.yml: strict).  The notebook
# pages show executed outputs (mkdocs_hooks.py, tools/nbexec.py): the copies the tests executed
# (build/notebooks/) when current, else the notebooks run now (about a minute); the API pages
# import the built package.
docs: build-py docdeps
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --config-file mkdocs.yml --site-dir build/site

# JupyterLab on docs/notebooks with the .venv kernel (installs JupyterLab into .venv on first use).
notebooks: build-py
	@$(VPY) -c 'import jupyterlab, ipykernel' >/dev/null 2>&1 || { echo "pip install: $(NB_PKGS) ipykernel"; $(VPY) -m pip install -q $(NB_PKGS) ipykernel; }
	$(VENV)/bin/jupyter lab --notebook-dir=docs/notebooks

# GoogleTest suite under AddressSanitizer + UndefinedBehaviorSanitizer (not part of `make test`).
sanitize: sysdeps
	cmake -S . -B build/sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAQM_BUILD_TESTS=ON -DAQM_SANITIZE=ON >/dev/null
	cmake --build build/sanitize -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir build/sanitize --output-on-failure --no-tests=error -j $(JOBS)

demo: build-py
	MPLBACKEND=Agg $(VPY) examples/demo.py

bench: build-py
	$(VPY) benchmarks/bench_stationary.py

clean:
	rm -rf build out
