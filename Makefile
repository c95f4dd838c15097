# make test | make demo | make bench — each sets up .venv from nothing when needed.
PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
DEPS   := $(VENV)/.deps-installed
JOBS   ?= $(shell nproc 2>/dev/null || echo 2)
export MAX_JOBS ?= $(JOBS)
# Read when Paddle loads: quiet its logging; idle OpenMP threads sleep instead of spinning (on a
# small shared machine spinning helpers starve the next op and make timings noisy).
export GLOG_minloglevel ?= 2
export OMP_WAIT_POLICY ?= PASSIVE

.PHONY: venv build test test-gpu bench-gpu demo bench info clean

venv: $(DEPS)
$(DEPS): requirements.txt
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --disable-pip-version-check -q -r requirements.txt
	touch $@

# Rebuilds the op library from ops/*.yaml and the C++/CUDA sources, and installs paddle_ext.
build: $(DEPS)
	$(VPY) -m pip install --disable-pip-version-check -q --no-build-isolation --no-deps .

test: build
	$(VPY) -m pytest unittests -q -p no:cacheprovider --durations=10 $(PYTEST_ARGS)

# The CUDA runtime suite alone (skips without a GPU).
test-gpu: build
	$(VPY) -m pytest unittests/gpu -q -p no:cacheprovider -rs $(PYTEST_ARGS)

# The CUDA launchers timed with CUDA events next to a device copy and torch's CUDA ops (needs a GPU; no
# Paddle needed, so it also runs with a plain `python3 unittests/gpu/bench_gpu.py` on a bare GPU machine).
bench-gpu: $(DEPS)
	$(VPY) unittests/gpu/bench_gpu.py $(ARGS)

demo: build
	$(VENV)/bin/paddle-ext demo $(ARGS)

# torch (requirements-bench.txt) only for the bench's comparison columns; the bench runs without it.
bench: build
	$(VPY) -m pip install --disable-pip-version-check -q -r requirements-bench.txt || echo "bench: torch not installed, its columns are left out"
	$(VENV)/bin/paddle-ext bench $(ARGS)

info: build
	$(VENV)/bin/paddle-ext info

clean:
	rm -rf build *.egg-info
