"""The CUDA kernels' cell functors, run on the host (no GPU needed): gpu/mutual_information.cu is
compiled with nvcc into a host library that walks the anti-diagonals in the kernels' order and calls
the same ForwardCell / BackwardCell the device code calls; the results must equal the CPU op.
This checks the CUDA indexing here; unittests/gpu/ checks the kernels themselves on a GPU."""

import ctypes
import pathlib
import shutil
import subprocess

import numpy as np
import paddle
import pytest

import paddle_ext
import refs

ROOT = pathlib.Path(__file__).resolve().parents[1]

HARNESS = r"""
#include "paddle_ext/gpu/mutual_information.cu"
using namespace paddle_ext;
using namespace paddle_ext::gpu;

template <bool kReverse, typename Cell>
static void host_wavefront(const MIBox& box, const Cell& cell) {
  const index_t ns = box.s_end - box.s_begin, nt = box.t_end - box.t_begin;
  for (index_t i = 0; i <= ns + nt; ++i) {
    const index_t d = kReverse ? ns + nt - i : i;
    const index_t lo = d > nt ? d - nt : 0, hi = d < ns ? d : ns;
    for (index_t k = lo; k <= hi; ++k) cell(box.s_begin + k, box.t_begin + d - k);
  }
}

extern "C" void host_forward(const double* px, const double* py, const int64_t* boundary, double* p, double* ans,
                             int64_t B, int64_t S, int64_t T, int modified) {
  const index_t P1 = T + 1, T1 = modified ? T : T + 1;
  for (index_t b = 0; b < B; ++b) {
    const MIBox box = mi_box(boundary, b, S, T);
    double* pb = p + b * (S + 1) * P1;
    for (index_t i = 0; i < (S + 1) * P1; ++i) pb[i] = -INFINITY;
    const ForwardCell<double> cell{px + b * S * T1, py + b * (S + 1) * T, pb, T1, P1, box.s_begin, box.t_begin,
                                   modified != 0};
    host_wavefront<false>(box, cell);
    ans[b] = pb[box.s_end * P1 + box.t_end];
  }
}

extern "C" void host_backward(const double* px, const double* py, const int64_t* boundary, const double* p,
                              double* g, double* px_grad, double* py_grad, int64_t B, int64_t S, int64_t T,
                              int modified) {
  const index_t P1 = T + 1, T1 = modified ? T : T + 1;
  for (index_t b = 0; b < B; ++b) {
    const MIBox box = mi_box(boundary, b, S, T);
    const BackwardCell<double> cell{px + b * S * T1, py + b * (S + 1) * T, p + b * (S + 1) * P1, g + b * (S + 1) * P1,
                                    px_grad + b * S * T1, py_grad + b * (S + 1) * T, T1, P1, box.s_end, box.t_end,
                                    1.0, modified != 0};
    host_wavefront<true>(box, cell);
  }
}
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not pathlib.Path(nvcc).exists():
        pytest.skip("nvcc not found")
    tmp = tmp_path_factory.mktemp("mi_cells")
    src, out = tmp / "harness.cu", tmp / "libmi_cells.so"
    src.write_text(HARNESS)
    cmd = [nvcc, "-std=c++17", "-O2", "--expt-relaxed-constexpr", "-DPADDLE_EXT_WITH_CUDA", "-shared", "-Xcompiler",
           "-fPIC", "-arch=sm_80", f"-I{ROOT / 'paddle_ext' / 'include'}", f"-I{ROOT}", str(src), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return ctypes.CDLL(str(out))


def _ptr(a):
    return ctypes.c_void_p(a.ctypes.data) if a is not None else ctypes.c_void_p(0)


@pytest.mark.parametrize("modified", [False, True])
@pytest.mark.parametrize("with_boundary", [False, True])
def test_cuda_cells_equal_cpu_op(lib, modified, with_boundary):
    B, S, T = 4, 7, 12
    rng = np.random.default_rng(5)
    px = rng.normal(-1, 1, size=(B, S, T if modified else T + 1))
    py = rng.normal(-1, 1, size=(B, S + 1, T))
    py[2, 3, 4] = -np.inf
    boundary = np.array([[0, 0, S, T], [1, 2, 6, 11], [0, 0, 5, 12], [3, 4, 3, 4]], np.int64) if with_boundary else None
    p = np.zeros((B, S + 1, T + 1))
    ans = np.zeros(B)
    i64 = ctypes.c_int64
    lib.host_forward(_ptr(px), _ptr(py), _ptr(boundary), _ptr(p), _ptr(ans), i64(B), i64(S), i64(T), int(modified))
    g = np.zeros_like(p)
    gx, gy = np.zeros_like(px), np.zeros_like(py)
    lib.host_backward(_ptr(px), _ptr(py), _ptr(boundary), _ptr(p), _ptr(g), _ptr(gx), _ptr(gy), i64(B), i64(S), i64(T),
                      int(modified))
    want, (wx, wy) = paddle_ext.mutual_information_recursion(
        paddle.to_tensor(px), paddle.to_tensor(py), None if boundary is None else paddle.to_tensor(boundary),
        return_grad=True)
    np.testing.assert_allclose(ans, want.numpy(), rtol=1e-12)
    np.testing.assert_allclose(p, refs.mutual_information(px, py, boundary)[1], rtol=1e-12)
    np.testing.assert_allclose(gx, wx.numpy(), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(gy, wy.numpy(), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("modified", [False, True])
@pytest.mark.parametrize("kind", ["masks", "spread"])
def test_cuda_cells_exact_on_wide_ranges(lib, modified, kind):
    # The CUDA cells are cell-by-cell log-adds (no shared reference): exact with -1e4 masks and +-700
    # spreads, like the reference recursion.
    B, S, T = 3, 6, 40
    rng = np.random.default_rng(17 + modified)
    px = rng.normal(0, 2, size=(B, S, T if modified else T + 1))
    py = rng.normal(0, 2, size=(B, S + 1, T))
    for a in (px, py):
        pick = rng.random(a.shape) < 0.25
        a[pick] = rng.choice([-1e4, -1e3, 1e3], size=pick.sum()) if kind == "masks" else \
            rng.uniform(-700, 700, size=pick.sum())
    p = np.zeros((B, S + 1, T + 1))
    ans = np.zeros(B)
    i64 = ctypes.c_int64
    lib.host_forward(_ptr(px), _ptr(py), _ptr(None), _ptr(p), _ptr(ans), i64(B), i64(S), i64(T), int(modified))
    g = np.zeros_like(p)
    gx, gy = np.zeros_like(px), np.zeros_like(py)
    lib.host_backward(_ptr(px), _ptr(py), _ptr(None), _ptr(p), _ptr(g), _ptr(gx), _ptr(gy), i64(B), i64(S), i64(T),
                      int(modified))
    ref_ans, ref_p = refs.mutual_information(px, py)
    tol = 64 * np.finfo(np.float64).eps * max(1e4, np.abs(ref_p[np.isfinite(ref_p)]).max())  # ulps of |p|
    np.testing.assert_allclose(ans, ref_ans, rtol=1e-12, atol=tol)
    rgx, rgy = refs.mutual_information_grad(px, py)
    np.testing.assert_allclose(gx, rgx, rtol=tol, atol=tol)
    np.testing.assert_allclose(gy, rgy, rtol=tol, atol=tol)
