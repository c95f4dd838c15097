# make test | make demo | make bench | make wheel | make release — each sets up .venv from nothing when needed.
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

.PHONY: venv build wheel sdist release test test-sanitize test-compat test-gpu test-gpu-emulated bench-gpu demo bench info clean

venv: $(DEPS)
$(DEPS): requirements.txt
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --disable-pip-version-check -q -r requirements.txt
	touch $@

# Compiles what changed (the kernel library once, the binding of .venv's Paddle; tools/native_build.py
# prints each step), then installs paddle_ext with them into .venv.
build: $(DEPS)
	$(VPY) tools/native_build.py binding
	$(VPY) -m pip install --disable-pip-version-check -q --no-build-isolation --no-deps .

WHEEL_DEPS := $(VENV)/.wheel-deps-installed
$(WHEEL_DEPS): requirements-wheel.txt $(DEPS)
	$(VPY) -m pip install --disable-pip-version-check -q -r requirements-wheel.txt
	touch $@

# dist/paddle_ext-<version>-py3-none-manylinux_2_24_x86_64.whl: the kernel library and one binding per supported
# CPU release of Paddle (their headers come from each release's wheel, fetched once into build/paddle-sdk),
# linked for older distributions (tools/manylinux.py). auditwheel audits it with the libraries of the user's
# Paddle (libpaddle.so, its libiomp5.so) left out, as they are never bundled, and tags it: it fails when a
# symbol is newer than the policy allows.
MANYLINUX_POLICY := manylinux_2_24_x86_64
wheel: $(DEPS) $(WHEEL_DEPS)
	$(VPY) tools/native_build.py binding --release all --manylinux
	rm -rf build/wheel dist/paddle_ext-*.whl
	PADDLE_EXT_RELEASES=all PADDLE_EXT_MANYLINUX=1 $(VPY) -m pip wheel --disable-pip-version-check -q --no-build-isolation --no-deps . -w build/wheel
	$(VENV)/bin/auditwheel repair --plat $(MANYLINUX_POLICY) --only-plat --exclude libpaddle.so --exclude libiomp5.so \
	  --patcher none -w dist build/wheel/paddle_ext-*.whl
	@ls -l dist/paddle_ext-*.whl

# dist/paddle_ext-<version>.tar.gz: the sources; `pip install --no-build-isolation` builds it against the
# Paddle installed (PADDLE_EXT_WITH_CUDA=1: with the CUDA kernels).
sdist: $(DEPS) $(WHEEL_DEPS)
	rm -f dist/paddle_ext-*.tar.gz
	$(VPY) -m build --sdist --no-isolation -o dist .

# dist/simple/: a PEP 503 package index holding the wheel and the sdist (both through `twine check`), for
# `pip install --index-url file://$(abspath dist/simple) paddle-ext`.
release: wheel sdist
	$(VENV)/bin/twine check --strict dist/paddle_ext-*.whl dist/paddle_ext-*.tar.gz
	$(VPY) tools/package_index.py dist

# (with the wheel's tools: test_native_build.py links a probe the manylinux way)
test: build $(WHEEL_DEPS)
	$(VPY) -m pytest unittests -q -p no:cacheprovider --durations=10 $(PYTEST_ARGS)

# `make test-compat PADDLE=3.0.0`: installs paddle-ext from the release's index (`make release`: the wheel) with
# no compiler reachable, as a user would from a package index, into its own
# .venv-compat-<release> with that Paddle, and runs a compact suite: each op family's forward, grads, static
# program, export + jit.load + paddle.inference, AMP, empty tensors and a bad-input error, a user's script,
# plus the registry, the installed files and the import checks.
COMPAT_VENV := .venv-compat-$(PADDLE)
COMPAT_PY   := $(COMPAT_VENV)/bin/python
COMPAT_TESTS := unittests/test_registry.py unittests/test_install_layout.py unittests/test_cpu_environment.py \
  unittests/test_user_script.py \
  unittests/test_pipeline.py::test_a_process_that_only_imports_serves_an_exported_model \
  unittests/test_pipeline.py::test_bad_values_in_static_graphs_raise_and_the_process_lives \
  unittests/test_pipeline.py::test_import_names_the_supported_releases_under_another_paddle \
  unittests/test_pipeline.py::test_under_no_grad_outputs_want_no_grad_and_inputs_get_none \
  unittests/test_amp.py::test_small_model_trains_under_auto_cast \
  unittests/test_amp.py::test_dtype_returned_under_auto_cast \
  unittests/test_logcumsumexp_op.py::test_forward_every_dtype \
  unittests/test_logcumsumexp_op.py::test_grad_matches_numeric \
  unittests/test_logcumsumexp_op.py::test_bad_arguments \
  unittests/test_logcumsumexp_op.py::test_empty_tensors \
  unittests/test_mutual_information_op.py::test_empty_batch \
  unittests/test_adaptive_log_softmax_op.py::test_empty_rows \
  unittests/test_put_along_axis_op.py::test_grad_matches_numeric \
  unittests/test_put_along_axis_op.py::test_inplace_grad_static \
  unittests/test_put_along_axis_op.py::test_errors_name_the_argument_and_value \
  unittests/test_mutual_information_op.py::test_forward_every_dtype \
  unittests/test_mutual_information_op.py::test_grad_matches_numeric_dygraph_and_static \
  unittests/test_mutual_information_op.py::test_bad_shapes_and_dtypes \
  unittests/test_rnnt_loss.py::test_full_loss_numeric_grads \
  unittests/test_rnnt_loss.py::test_full_and_pruned_losses_static \
  unittests/test_rnnt_loss.py::test_pruned_loss_rejects_invalid_ranges \
  unittests/test_rnnt_joint_logprobs.py::test_every_dtype \
  unittests/test_rnnt_joint_logprobs.py::test_numeric_grads \
  unittests/test_rnnt_joint_logprobs.py::test_static_and_export \
  unittests/test_adaptive_log_softmax_op.py::test_every_dtype \
  unittests/test_adaptive_log_softmax_op.py::test_target_grad_matches_numeric \
  unittests/test_adaptive_log_softmax_op.py::test_static_program_rejects_bad_target_in_cpp \
  unittests/test_adaptive_log_softmax_layer.py::test_static_mode_layer

test-compat: release
	@test -n "$(PADDLE)" || { echo "make test-compat: name a Paddle release, e.g. make test-compat PADDLE=3.0.0" >&2; exit 2; }
	test -x $(COMPAT_PY) || $(PYTHON) -m venv $(COMPAT_VENV)
	sed '/^paddlepaddle==/d' requirements.txt > $(COMPAT_VENV)/requirements.txt
	$(COMPAT_PY) -m pip install --disable-pip-version-check -q "paddlepaddle==$(PADDLE)" -r $(COMPAT_VENV)/requirements.txt
	$(COMPAT_PY) -m pip uninstall --disable-pip-version-check -q -y paddle-ext paddle_ext_lib 2>/dev/null || true
	PATH="$(abspath $(COMPAT_VENV))/bin:$$PATH" tools/without_compilers.sh \
	  pip install --disable-pip-version-check -q --index-url "file://$(abspath dist/simple)" paddle-ext
	PATH="$(abspath $(COMPAT_VENV))/bin:$$PATH" tools/without_compilers.sh \
	  python -m pytest $(COMPAT_TESTS) -q -p no:cacheprovider --durations=5 $(PYTEST_ARGS)

# The kernel library and the binding built with AddressSanitizer + UBSan into build/sanitize/ (the normal build
# is left as it is), installed into build/sanitize/site, and the fuzz suite and the op tests run on them with
# the runtimes preloaded (tools/sanitize_run.py); fails on any report in our code, counts the others.
SANITIZE_SITE  := build/sanitize/site
SANITIZE_TESTS ?= unittests/test_fuzz.py $(wildcard unittests/test_*_op.py) \
  unittests/test_put_along_axis_integers.py unittests/test_put_along_axis_nonfinite.py \
  unittests/test_put_along_axis_layouts.py unittests/test_logcumsumexp_kernels.py unittests/test_rnnt_loss.py \
  unittests/test_rnnt_joint_logprobs.py unittests/test_rnnt_simple_logprobs.py unittests/test_rnnt_fastemit.py \
  unittests/test_joint_mutual_information.py unittests/test_transducer_jump_loss.py unittests/test_adaptive_gemm.py \
  unittests/test_rnnt_fused_joiner.py unittests/test_transducer_jump_fused_joiner.py

test-sanitize: $(DEPS)
	PADDLE_EXT_SANITIZE=1 $(VPY) tools/native_build.py binding
	rm -rf $(SANITIZE_SITE)
	PADDLE_EXT_SANITIZE=1 $(VPY) -m pip install --disable-pip-version-check -q --no-build-isolation --no-deps \
	  --target $(SANITIZE_SITE) .
	$(VPY) tools/sanitize_run.py $(SANITIZE_SITE) -- \
	  $(VPY) -m pytest $(SANITIZE_TESTS) -q -p no:cacheprovider $(PYTEST_ARGS)

# The CUDA runtime suite alone (skips without a GPU).
test-gpu: build
	$(VPY) -m pytest unittests/gpu -q -p no:cacheprovider -rs $(PYTEST_ARGS)

# The CUDA runtime suite without a GPU: the CUDA sources and the shims built for the CPU on the emulated CUDA
# runtime of unittests/gpu/emulation (docs/gpu_emulation.md; g++ only, no CUDA toolkit).
test-gpu-emulated: $(DEPS)
	PADDLE_EXT_GPU_EMULATE=1 $(VPY) -m pytest unittests/gpu -q -p no:cacheprovider -rfEs --durations=10 $(PYTEST_ARGS)

# The CUDA launchers timed with CUDA events next to a device copy and torch's CUDA ops (needs a GPU; no
# Paddle needed, so it also runs with a plain `python3 unittests/gpu/bench_gpu.py` on a bare GPU machine).
bench-gpu: $(DEPS)
	$(VPY) unittests/gpu/bench_gpu.py $(ARGS)

demo: build
	$(VENV)/bin/paddle-ext demo $(ARGS)

# Benchmark-only requirements (torch) on top of the build.
BENCH_DEPS := $(VENV)/.bench-deps-installed
$(BENCH_DEPS): requirements-bench.txt $(DEPS)
	$(VPY) -m pip install --disable-pip-version-check -q -r requirements-bench.txt \
	  || echo "make bench: torch not installed; the torch and fast_rnnt columns are left out"
	touch $@

bench: build $(BENCH_DEPS)
	$(VENV)/bin/paddle-ext bench $(ARGS)

info: build
	$(VENV)/bin/paddle-ext info

clean:
	rm -rf build dist *.egg-info
