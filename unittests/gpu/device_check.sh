#!/usr/bin/env bash
# The checks to run on a lent GPU machine, as one script (device time is short: build the library ahead on a
# CPU machine with `python -c "import gpu_runtime; gpu_runtime.build_library()"` and carry build/gpu_tests).
#
#   unittests/gpu/device_check.sh OUT_DIR
#
# Runs the GPU runtime suite and the GPU benchmark (with fast_rnnt next to mutual_information where
# `import fast_rnnt` works), keeping their output under OUT_DIR.
# Environment: PYTHON (python3), BASELINE_LIB (an older build's library, benched after ours on the same
# GPU), BENCH_ARGS, PYTEST_ARGS, TEST_TIMEOUT and BENCH_TIMEOUT (seconds, 240 each).
set -u
out=${1:?usage: device_check.sh OUT_DIR}
py=${PYTHON:-python3}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > "$out/gpu.txt" 2>&1
cat "$out/gpu.txt"
workers=""
"$py" -c "import xdist" 2>/dev/null && workers="-n 8"
start=$(date +%s)
timeout "${TEST_TIMEOUT:-240}" "$py" -m pytest unittests/gpu -q -p no:cacheprovider -rfE $workers ${PYTEST_ARGS:-} \
  > "$out/gpu_tests.log" 2>&1
echo "gpu suite: rc $? in $(( $(date +%s) - start )) s"
grep -E "passed|failed|error" "$out/gpu_tests.log" | tail -3
grep -E "^(FAILED|ERROR)" "$out/gpu_tests.log" | head -40
start=$(date +%s)
timeout "${BENCH_TIMEOUT:-240}" "$py" unittests/gpu/bench_gpu.py --json "$out/bench.json" ${BENCH_ARGS:-} > "$out/bench.log" 2>&1
echo "bench: rc $? in $(( $(date +%s) - start )) s"
sed -n '/^\*\*/,$p' "$out/bench.log"
if [ -n "${BASELINE_LIB:-}" ]; then
  start=$(date +%s)
  PADDLE_EXT_GPU_LIB="$BASELINE_LIB" timeout "${BENCH_TIMEOUT:-240}" "$py" unittests/gpu/bench_gpu.py \
    --json "$out/bench_baseline.json" ${BENCH_ARGS:-} > "$out/bench_baseline.log" 2>&1
  echo "baseline bench: rc $? in $(( $(date +%s) - start )) s"
fi
exit 0
