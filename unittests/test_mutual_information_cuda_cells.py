"""The CUDA kernels' cell functors, run on the host (no GPU needed): gpu/mutual_information.cu is
compiled with nvcc into a host library that runs the launchers' passes (pre-pass, band walk, post-pass,
the log-space redo's ForwardCell wavefront) with the functors the device code calls; the results must
equal the CPU op.
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
from fuzz_cases import random_boxes

ROOT = pathlib.Path(__file__).resolve().parents[1]

HARNESS = r"""
#include "paddle_ext/gpu/mutual_information.cu"
#include <vector>
using namespace paddle_ext;
using namespace paddle_ext::gpu;

template <typename Cell>
static void host_wavefront(const MIBox& box, const Cell& cell) {
  const index_t ns = box.s_end - box.s_begin, nt = box.t_end - box.t_begin;
  for (index_t d = 0; d <= ns + nt; ++d) {
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
    host_wavefront(box, cell);
    ans[b] = pb[box.s_end * P1 + box.t_end];
  }
}

// The band kernels' walk (band_walk) on the host: warps one after another (band w needs only band w - 1),
// the 32 lanes of a warp in lockstep per step (a shuffle reads the lane's values before the step), the
// chunk's coefficients loaded ahead as on the device; the ring becomes the full top row of the band below.
// Passes of kHostPassRows rows (the device's are 32 * kMaxWarps): the first band of a later pass reads the
// previous pass's top row through pol.row_get, which the last band of that pass stored with pol.row_put.
constexpr index_t kHostPassRows = 64;
template <typename Pol>
static void host_band_walk(Pol& pol, index_t nrows, index_t ncols, bool modified) {
  using V = typename Pol::Value;
  using Coef = typename Pol::Coef;
  const index_t nbands = (nrows + 31) / 32, shift = modified ? 1 : 0;
  std::vector<V> below_row(ncols, Pol::zero());
  for (index_t w = 0; w < nbands; ++w) {
    const index_t r0 = w * 32 / kHostPassRows * kHostPassRows;
    const int pass = int(r0 / kHostPassRows);
    const bool to_row = (w + 1) * 32 % kHostPassRows == 0 && (w + 1) * 32 < nrows;
    if (w * 32 == r0 && r0 > 0)
      for (index_t c = 0; c < ncols; ++c) below_row[c] = pol.row_get((pass - 1) & 1, r0 - 1, c);
    std::vector<V> top(ncols, Pol::zero());
    V left[32], left2[32];
    for (int l = 0; l < 32; ++l) left[l] = left2[l] = Pol::zero();
    for (index_t j0 = 0; j0 < ncols + 31; j0 += kChunk) {
      Coef co[32][kChunk];
      for (int l = 0; l < 32; ++l)
        for (int i = 0; i < kChunk; ++i) co[l][i] = pol.fetch(w * 32 + l, j0 + i - l);
      for (int i = 0; i < kChunk; ++i) {
        V pl[32], pl2[32];
        for (int l = 0; l < 32; ++l) pl[l] = left[l], pl2[l] = left2[l];
        for (int l = 0; l < 32; ++l) {
          const index_t c = j0 + i - l, r = w * 32 + l, cb = c - shift;
          const V below = l > 0 ? (modified ? pl2[l - 1] : pl[l - 1])
                                : (w > 0 && cb >= 0 && cb < ncols ? below_row[cb] : Pol::zero());
          const bool active = r < nrows && c >= 0 && c < ncols;
          const V cur = active ? pol.step(below, pl[l], co[l][i], r, c) : Pol::zero();
          if (w + 1 < nbands && l == 31 && active) top[c] = cur;
          if (to_row && l == 31 && active) pol.row_put(pass & 1, r, c, cur);
          pol.emit(r, c, cur, active);
          left2[l] = pl[l];
          left[l] = cur;
        }
      }
    }
    below_row = top;
  }
}

extern "C" void host_ext_math(const double* r, double* exp_r, const double* a, double* exp_m, int* exp_k,
                              int* ok, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    exp_r[i] = mi_exp_reduced(r[i]);
    bool o = true;
    const MIExt e = mi_ext_exp(a[i], o);
    exp_m[i] = e.m, exp_k[i] = e.k, ok[i] = o;
  }
}

// The launchers' sequence on the host: the parallel pre-pass over every cell, the walk per item (the
// log-space redo for a flagged item or one whose exponents left the range), the post-pass over every cell.
// Workspaces, p and the grads start as NaN: whatever the walk or the post-pass read must have been written.
// Returns how many items took the log-space redo.
template <typename F>
static void host_cells(const F& f, index_t B, index_t S, index_t T) {
  for (index_t b = 0; b < B; ++b)
    for (index_t s = 0; s <= S; ++s)
      for (index_t t = 0; t <= T; ++t) f(b, s, t);
}
// skew_cells_kernel's range: every lane of every band, every step (the functors skip what is outside the box).
template <typename F>
static void host_skew_cells(const F& f, index_t B, index_t S, index_t T) {
  for (index_t b = 0; b < B; ++b)
    for (index_t r = 0; r < (S + 1 + 31) / 32 * 32; ++r)
      for (index_t j = 0; j < T + 32; ++j) f(b, r, j - (r & 31));
}

extern "C" int host_band_forward(const double* px, const double* py, const int64_t* boundary, double* p, double* ans,
                                 int64_t B, int64_t S, int64_t T, int modified) {
  const index_t P1 = T + 1, T1 = modified ? T : T + 1, Z = skew_item(S, T), n = B * Z;
  std::vector<double> xm(n, NAN), ym(n, NAN);
  std::vector<int> xk(n, 1 << 30), yk(n, 1 << 30), flag(B, 0);
  for (index_t i = 0; i < B * (S + 1) * P1; ++i) p[i] = NAN;
  host_skew_cells(ForwardPre<double>{px, py, boundary, xm.data(), ym.data(), xk.data(), yk.data(), flag.data(), S, T, Z,
                                modified != 0}, B, S, T);
  int redone = 0;
  for (index_t b = 0; b < B; ++b) {
    const MIBox box = mi_box(boundary, b, S, T);
    double* pb = p + b * (S + 1) * P1;
    ForwardBand pol{xm.data() + b * Z, ym.data() + b * Z, xk.data() + b * Z, yk.data() + b * Z, Skew{T + 32},
                    box.s_end - box.s_begin + 1, box.t_end - box.t_begin + 1, true};
    if (!flag[b]) host_band_walk(pol, pol.nrows, pol.ncols, modified != 0);
    if (flag[b] || !pol.ok) {
      ++redone;
      for (index_t i = 0; i < (S + 1) * P1; ++i) pb[i] = -INFINITY;
      const ForwardCell<double> cell{px + b * S * T1, py + b * (S + 1) * T, pb, T1, P1, box.s_begin, box.t_begin,
                                     modified != 0};
      host_wavefront(box, cell);
      ans[b] = pb[box.s_end * P1 + box.t_end];
      flag[b] = 1;
    }
  }
  host_skew_cells(ForwardPost<double>{boundary, xm.data(), xk.data(), flag.data(), p, ans, S, T, Z}, B, S, T);
  if (boundary != nullptr) host_cells(ForwardFill{boundary, flag.data(), p, S, T}, B, S, T);
  return redone;
}

extern "C" void host_band_backward(const double* px, const double* py, const int64_t* boundary, const double* p,
                                   const double* ans_grad, double* px_grad, double* py_grad, int64_t B, int64_t S,
                                   int64_t T, int modified) {
  const index_t Z = skew_item(S, T), n = B * Z;
  std::vector<double> w1(n, NAN), w2(n, NAN), g(n, NAN);
  host_skew_cells(BackwardPre<double>{px, py, boundary, p, w1.data(), w2.data(), S, T, Z, modified != 0}, B, S, T);
  for (index_t b = 0; b < B; ++b) {
    const MIBox box = mi_box(boundary, b, S, T);
    BackwardBand pol{w1.data() + b * Z, w2.data() + b * Z, g.data() + b * Z, Skew{T + 32},
                     box.s_end - box.s_begin + 1, box.t_end - box.t_begin + 1,
                     ans_grad == nullptr ? 1.0 : ans_grad[b], modified != 0};
    host_band_walk(pol, pol.nrows, pol.ncols, modified != 0);
  }
  host_skew_cells(BackwardPost<double>{boundary, w1.data(), w2.data(), g.data(), px_grad, py_grad, S, T, Z, modified != 0},
             B, S, T);
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
    want = paddle_ext.mutual_information_recursion(
        paddle.to_tensor(px), paddle.to_tensor(py), None if boundary is None else paddle.to_tensor(boundary))
    np.testing.assert_allclose(ans, want.numpy(), rtol=1e-12)
    np.testing.assert_allclose(p, refs.mutual_information(px, py, boundary)[1], rtol=1e-12)


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
    ref_ans, ref_p = refs.mutual_information(px, py)
    tol = 64 * np.finfo(np.float64).eps * max(1e4, np.abs(ref_p[np.isfinite(ref_p)]).max())  # ulps of |p|
    np.testing.assert_allclose(ans, ref_ans, rtol=1e-12, atol=tol)


def _band(lib, px, py, boundary, ans_grad=None):
    B, S, T1 = px.shape
    T = py.shape[2]
    modified = int(T1 == T)
    p = np.zeros((B, S + 1, T + 1))
    ans = np.zeros(B)
    i64 = ctypes.c_int64
    lib.host_band_forward.restype = ctypes.c_int
    redone = lib.host_band_forward(_ptr(px), _ptr(py), _ptr(boundary), _ptr(p), _ptr(ans), i64(B), i64(S), i64(T),
                                   modified)
    # Without boundary the CUDA launcher does not zero the grads first: the post-pass must write every element.
    gx, gy = (np.zeros_like(px), np.zeros_like(py)) if boundary is not None else \
        (np.full_like(px, np.nan), np.full_like(py, np.nan))
    lib.host_band_backward(_ptr(px), _ptr(py), _ptr(boundary), _ptr(p), _ptr(ans_grad), _ptr(gx), _ptr(gy), i64(B),
                           i64(S), i64(T), modified)
    return ans, p, gx, gy, redone


# Band edges (31/32/33 rows: one full band, a partial second one; 64/65: a third), columns around the chunk
# (16) and the ring (64), empty sides (S = 0, T = 0), and boxes starting and ending inside bands and chunks;
# passes (64 rows here): 64/65 rows (a second pass of 0/1 row), 96, 127/128 (two full passes), 130 (three).
@pytest.mark.parametrize("modified", [False, True])
@pytest.mark.parametrize("S,T", [(0, 0), (0, 5), (4, 0), (1, 1), (31, 15), (32, 16), (33, 17), (45, 64), (64, 65),
                                 (65, 130), (96, 40), (127, 20), (128, 9), (130, 25)])
def test_cuda_band_walk_equals_cpu_op(lib, modified, S, T):
    B = 4
    rng = np.random.default_rng(S * 1000 + T + modified)
    px = rng.normal(-1, 1, size=(B, S, T if modified else T + 1))
    py = rng.normal(-1, 1, size=(B, S + 1, T))
    if py.size:
        py.reshape(-1)[rng.integers(0, py.size)] = -np.inf
    ans_grad = rng.normal(size=B)
    for boundary in (None, random_boxes(B, S, T, rng)):
        ans, p, gx, gy, redone = _band(lib, px, py, boundary, ans_grad)
        assert redone == 0  # normal-range data stays on the extended-range chain
        want, (wx, wy) = paddle_ext.mutual_information_recursion(
            paddle.to_tensor(px), paddle.to_tensor(py), None if boundary is None else paddle.to_tensor(boundary),
            return_grad=True)
        rgx, rgy = refs.mutual_information_grad(px, py, boundary, ans_grad)
        np.testing.assert_array_equal(np.isneginf(ans), np.isneginf(want.numpy()))
        np.testing.assert_allclose(ans, want.numpy(), rtol=1e-12, atol=1e-12)
        ref_p = refs.mutual_information(px, py, boundary)[1]
        np.testing.assert_array_equal(np.isneginf(p), np.isneginf(ref_p))
        fin = np.isfinite(ref_p)
        np.testing.assert_allclose(p[fin], ref_p[fin], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(gx, rgx, rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(gy, rgy, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("modified", [False, True])
@pytest.mark.parametrize("kind", ["masks", "spread", "big", "nan", "posinf", "neginf_rows"])
def test_cuda_band_walk_exact_on_wide_ranges(lib, modified, kind):
    # -1e4/+-1e3 masks, +-700 spreads and +-3e5 entries stay on the extended-range chain and exact; NaN,
    # +inf (and |x| > 1e6) take the log-space redo; -inf rows give -inf cells and zero grads, no NaN.
    B, S, T = 3, 40, 70
    rng = np.random.default_rng(31 + modified)
    px = rng.normal(0, 2, size=(B, S, T if modified else T + 1))
    py = rng.normal(0, 2, size=(B, S + 1, T))
    for a in (px, py):
        pick = rng.random(a.shape) < 0.25
        a[pick] = {"masks": lambda n: rng.choice([-1e4, -1e3, 1e3], size=n),
                   "spread": lambda n: rng.uniform(-700, 700, size=n),
                   "big": lambda n: rng.choice([-3e5, 3e5, -1e6], size=n),
                   "nan": lambda n: np.where(rng.random(n) < 0.01, np.nan, -1.0),
                   "posinf": lambda n: np.where(rng.random(n) < 0.01, np.inf, -1.0),
                   "neginf_rows": lambda n: rng.normal(size=n)}[kind](pick.sum())
    if kind == "neginf_rows":
        px[1, 5, :] = -np.inf
        py[2, :, 10] = -np.inf
    ans, p, gx, gy, redone = _band(lib, px, py, None)
    assert redone == (B if kind in ("nan", "posinf") else 0)
    ref_ans, ref_p = refs.mutual_information(px, py)
    if kind in ("nan", "posinf"):
        np.testing.assert_array_equal(np.isnan(p), np.isnan(ref_p))
        ok = ~np.isnan(ref_p)
        np.testing.assert_allclose(p[ok], ref_p[ok], rtol=1e-12, atol=1e-12)
        return
    fin = ref_p[np.isfinite(ref_p)]
    tol = 64 * np.finfo(np.float64).eps * max(1e4, np.abs(fin).max())  # ulps of |p|
    np.testing.assert_array_equal(np.isneginf(p), np.isneginf(ref_p))
    np.testing.assert_allclose(p[np.isfinite(ref_p)], fin, rtol=1e-12, atol=tol)
    np.testing.assert_allclose(ans, ref_ans, rtol=1e-12, atol=tol)
    rgx, rgy = refs.mutual_information_grad(px, py)
    assert not np.isnan(gx).any() and not np.isnan(gy).any()
    np.testing.assert_allclose(gx, rgx, rtol=tol, atol=tol)
    np.testing.assert_allclose(gy, rgy, rtol=tol, atol=tol)


def test_ext_math_within_ulps(lib):
    # The forward pre-pass's exp: the reduced-argument Taylor series and mi_ext_exp (m * 2^k) against libm;
    # NaN, +inf and |x| > 1e6 clear ok, -inf gives m = 0.
    rng = np.random.default_rng(3)
    n = 200000
    r = np.concatenate([rng.uniform(-0.3466, 0.3466, n - 5), [0.0, -0.3466, 0.3466, 1e-300, -1e-20]])
    a = np.concatenate([rng.uniform(-700, 700, n - 8), [-np.inf, np.inf, np.nan, 0.0, 1e6, -1e6, 1.5e6, -709.0]])
    e, m = np.empty_like(r), np.empty_like(a)
    k, ok = np.empty(n, np.int32), np.empty(n, np.int32)
    lib.host_ext_math(_ptr(r), _ptr(e), _ptr(a), _ptr(m), _ptr(k), _ptr(ok), ctypes.c_int64(n))
    assert np.max(np.abs(e - np.exp(r)) / np.exp(r)) <= 2 * np.finfo(float).eps
    np.testing.assert_array_equal(ok == 0, np.isnan(a) | (a == np.inf) | (np.abs(a) > 1e6) & np.isfinite(a))
    assert m[n - 8] == 0 and ok[n - 8]  # -inf: exp is 0, in range
    fin = (ok != 0) & (np.abs(a) <= 700)
    assert ((m[fin] >= 1) & (m[fin] < 2)).all()
    got = m[fin] * np.exp2(k[fin].astype(np.float64))
    assert np.max(np.abs(got - np.exp(a[fin])) / np.exp(a[fin])) <= 4 * np.finfo(float).eps
    big = (ok != 0) & np.isfinite(a) & (np.abs(a) > 700)  # beyond double's range: check the exponent
    np.testing.assert_allclose(k[big] * np.log(2) + np.log(m[big]), a[big], rtol=1e-15)
