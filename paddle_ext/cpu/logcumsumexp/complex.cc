// CPU logcumsumexp on complex64/complex128 in double lanes: kBlock lines side by side (one line per lane;
// neighbouring columns of a strided axis, or neighbouring rows), kSteps steps at a time, in linear form.
//   forward   S = the running sum of exp(x - M) from the carry's exp(acc - M), M the running max of the real
//             parts (raised, and S rescaled, when a term exceeds it); out = M + log|S| + i arg S: an exp, a
//             sincos, a log and an atan2 per element instead of complex_log_add_exp's two exps, two logs...
//             The imaginary part is put on the scalar scan's branch (the pivot's imaginary part, the
//             carry's or the term's when its real part is larger, plus arg S - pivot wrapped into (-pi, pi],
//             as complex_log_add_exp gives), and the edges (a term or a carry with real part -inf) take its
//             exact values. The carry between chunks is the last log value, as in the scalar scan.
//   backward  x_grad[j] = exp(conj(x[j]) + M) T[j], T[j] = the opposite-direction running sum of
//             g[i] exp(-conj(out[i]) - M), M the chunk's largest -Re out: two exps and two sincos per element,
//             no log. The carry is T at its scale M, shrunk when a chunk raises M.
// A lane's chunk with NaN, +inf, an imaginary part past simd::kSinCosMaxArg, terms that nearly cancel
// (|S| < 1e-6 of the terms' sizes, where the rounding differs from the scalar scan's), in the backward a
// -Re out range wider than kMaxRange (where terms would underflow) or a grad that could overflow, takes the
// scalar scan of logcumsumexp_complex.h from its carry in log form: the edge semantics are its own.
#include "paddle_ext/logcumsumexp_complex.h"
#include "paddle_ext/parallel.h"
#include "paddle_ext/vec_math.h"

#include <cmath>

#pragma GCC diagnostic ignored "-Wpsabi"  // wide vectors pass between always_inline functions (vec_math.h)

namespace paddle_ext::cpu {
namespace {

using simd::vd;
using simd::vl;

constexpr int kBlock = 8;            // lines per block: two AVX2 vectors, so two independent chains per step
constexpr index_t kSteps = 64;       // steps per chunk (8 KiB of doubles per buffer of a block)
constexpr index_t kColumnTile = 64;  // neighbouring columns per task: a step's 512 bytes share a page
constexpr double kMaxRange = 640.;   // exp(x - M) stays a normal double (> e^-708) within this range
constexpr double kMaxPhase = simd::kSinCosMaxArg;
constexpr double kMaxGrad = 1e290;   // |g| below this: the running sums cannot overflow
constexpr double kInf = std::numeric_limits<double>::infinity();

// The lines of one block and how its buffers map to memory: lane l's element at step k (in scan order)
// is at base[l] + pos(k) * stride; lanes past `valid` repeat the last line and are not stored.
struct Block {
  index_t base[kBlock];
  int valid;
  index_t n, stride;
  bool reverse;
  PE_VINLINE index_t offset(index_t k) const { return (reverse ? n - 1 - k : k) * stride; }

  template <typename T>
  PE_VINLINE void load(const T* src, index_t k0, index_t steps, double* re, double* im) const {
    for (index_t k = 0; k < steps; ++k) {
      const T* p = src + offset(k0 + k);
      for (int l = 0; l < kBlock; ++l) {
        re[k * kBlock + l] = static_cast<double>(p[base[l]].real);
        im[k * kBlock + l] = static_cast<double>(p[base[l]].imag);
      }
    }
  }
  template <typename T>
  PE_VINLINE void store(T* dst, index_t k0, index_t steps, const double* re, const double* im) const {
    for (index_t k = 0; k < steps; ++k) {
      T* p = dst + offset(k0 + k);
      for (int l = 0; l < valid; ++l) p[base[l]] = narrow<T>({re[k * kBlock + l], im[k * kBlock + l]});
    }
  }
};

// Lines [first, first + count) of a tensor viewed as [outer, n, inner] as blocks of kBlock.
inline Block make_block(index_t first, index_t count, index_t n, index_t inner, bool reverse) {
  Block b;
  b.valid = static_cast<int>(std::min<index_t>(count, kBlock));
  for (int l = 0; l < kBlock; ++l) {
    const index_t line = first + std::min<index_t>(l, b.valid - 1);
    b.base[l] = (line / inner) * n * inner + line % inner;
  }
  b.n = n;
  b.stride = inner;
  b.reverse = reverse;
  return b;
}

template <int W>
PE_VINLINE vd<W> load(const double* p) {
  return simd::loadu<W>(p);
}
template <int W>
PE_VINLINE vd<W> vabs(vd<W> v) {
  return simd::as_double<W>(simd::as_int<W>(v) & std::numeric_limits<int64_t>::max());
}

// Runs a kernel's chunk(block, k0, steps, state) over the tiles [t0, t1): kBlock lines per tile along
// contiguous rows, kColumnTile along a strided axis; chunk by chunk, every block of a tile per chunk.
template <int W, typename K, typename State>
PE_VINLINE void for_each_chunk(const K& k, index_t t0, index_t t1, index_t lines, index_t n, index_t inner,
                               bool reverse, State* state) {
  const index_t tile = inner == 1 ? kBlock : kColumnTile;
  for (index_t t = t0; t < t1; ++t) {
    const index_t first = t * tile, count = std::min(tile, lines - first);
    const index_t blocks = (count + kBlock - 1) / kBlock;
    for (index_t b = 0; b < blocks; ++b) state[b] = State();
    for (index_t k0 = 0; k0 < n; k0 += kSteps) {
      for (index_t b = 0; b < blocks; ++b) {
        k.template chunk<W>(make_block(first + b * kBlock, count - b * kBlock, n, inner, reverse), k0,
                std::min(kSteps, n - k0), state[b]);
      }
    }
  }
}

// -------------------------------------------------------------------------------------------- forward
struct ForwardState {  // per line: the last log value (the scalar scan's acc)
  double re[kBlock], im[kBlock];
  ForwardState() {
    for (int l = 0; l < kBlock; ++l) re[l] = -kInf, im[l] = 0.0;
  }
};

template <typename T>
struct ForwardChunk {
  const T* x;
  T* out;
  bool exclusive;

  template <int W>
  PE_VINLINE void chunk(const Block& blk, index_t k0, index_t steps, ForwardState& st) const {
    alignas(64) double xr[kSteps * kBlock], xi[kSteps * kBlock], sr[kSteps * kBlock], si[kSteps * kBlock];
    blk.load(x, k0, steps, xr, xi);
    const ForwardState carry = st;
    bool bad_lane[kBlock] = {};
    bool any_bad = false;
    for (int v = 0; v < kBlock / W; ++v) {
      const int o = v * W;
      vd<W> phase = vd<W>{}, check = vd<W>{};
      for (index_t k = 0; k < steps; ++k) {
        const vd<W> r = load<W>(xr + k * kBlock + o), i = load<W>(xi + k * kBlock + o);
        check += r + i * 0.0;  // NaN in either part, +inf, or an infinite imaginary part spoils it
        phase = simd::vmax<W>(phase, vabs<W>(i));
      }
      const vd<W> ar = load<W>(st.re + o), ai = load<W>(st.im + o);
      vl<W> bad = (check != check) | (check == kInf) | (phase > kMaxPhase) | (ar != ar) | (ar == kInf) |
                  ~(vabs<W>(ai) <= kMaxPhase);
      // S = the running sum of exp(x - M) from the carry's exp(acc - M), M the running max of the real parts
      // (so that out = M + log|S| is as exact as out itself); A = the sum of the terms' sizes.
      vd<W> M = ar;
      vd<W> Mz = simd::select<W>(M == -kInf, vd<W>{}, M);  // nothing yet: S = 0, and the selects below decide
      vd<W> cs, cc;
      simd::vsincos<W>(simd::select<W>(bad, vd<W>{}, ai), cs, cc);
      vd<W> A = simd::select<W>(ar == -kInf, vd<W>{}, simd::splat<W>(1.0));
      vd<W> Sr = A * cc, Si = A * cs;
      for (index_t k = 0; k < steps; ++k) {
        const index_t p = k * kBlock + o;
        const vd<W> r = load<W>(xr + p);
        const vl<W> raise = r > M;
        if (simd::any<W>(raise)) {
          // M = -inf gives 0; the lanes that keep M take exp(0), so that every lane's argument is <= 0.
          const vd<W> f = simd::select<W>(raise, simd::vexp_neg<W, true>(simd::select<W>(raise, M - r, vd<W>{})),
                                          simd::splat<W>(1.0));
          Sr *= f, Si *= f, A *= f;
          M = simd::select<W>(raise, r, M);
          Mz = simd::select<W>(M == -kInf, vd<W>{}, M);
        }
        const vd<W> e = simd::vexp_neg<W, true>(r - Mz);  // -inf gives 0
        vd<W> s, c;
        simd::vsincos<W>(load<W>(xi + p), s, c);
        Sr += e * c;
        Si += e * s;
        A += e;
        const vd<W> norm = Sr * Sr + Si * Si;
        // Terms that nearly cancel (|S| < 1e-6 A) take the scalar scan: its rounding is the reference's.
        bad |= norm < 1e-12 * (A * A);
        simd::storeu<W>(sr + p, Mz + 0.5 * simd::vlog<W, true>(norm));
        simd::storeu<W>(si + p, simd::vatan2<W>(Si, Sr));
      }
      for (int l = 0; l < W; ++l) bad_lane[o + l] = bad[l] != 0, any_bad |= bad[l] != 0;
      // The branch and the edge values, step by step: acc = log_add_exp(acc, x) as the scalar scan has it.
      vd<W> pr = ar, pi = ai;
      for (index_t k = 0; k < steps; ++k) {
        const index_t p = k * kBlock + o;
        const vd<W> r = load<W>(xr + p), i = load<W>(xi + p), arg = load<W>(si + p);
        const vd<W> pivot = simd::select<W>(pr >= r, pi, i);
        const vd<W> d = arg - pivot;
        const vd<W> m = (d * 0.15915494309189533577 + 6755399441055744.0) - 6755399441055744.0;
        // 2 pi in two parts, the high one of 33 bits: m * high is exact for |m| < 2^20.
        vd<W> nr = load<W>(sr + p), ni = pivot + ((d - m * 6.28318530693650245667e+00) - m * 2.43084020260247689973e-10);
        const vl<W> take_x = pr == -kInf, keep = r == -kInf;
        nr = simd::select<W>(keep, pr, simd::select<W>(take_x, r, nr));
        ni = simd::select<W>(keep, pi, simd::select<W>(take_x, i, ni));
        simd::storeu<W>(sr + p, exclusive ? pr : nr);
        simd::storeu<W>(si + p, exclusive ? pi : ni);
        pr = nr;
        pi = ni;
      }
      simd::storeu<W>(st.re + o, pr);
      simd::storeu<W>(st.im + o, pi);
    }
    if (any_bad) {
      for (int l = 0; l < kBlock; ++l) {
        if (!bad_lane[l]) continue;
        complex_acc acc = {carry.re[l], carry.im[l]};
        for (index_t k = 0; k < steps; ++k) {
          const index_t p = k * kBlock + l;
          const complex_acc next = complex_log_add_exp(acc, complex_acc{xr[p], xi[p]});
          const complex_acc value = exclusive ? acc : next;
          sr[p] = value.real;
          si[p] = value.imag;
          acc = next;
        }
        st.re[l] = acc.real;
        st.im[l] = acc.imag;
      }
    }
    blk.store(out, k0, steps, sr, si);
  }
};

// ------------------------------------------------------------------------------------------- backward
struct BackwardState {  // per line: T at scale M (M = -inf: nothing yet), or the log form L once it is NaN/+inf
  double scale[kBlock], re[kBlock], im[kBlock];
  bool stuck[kBlock];
  BackwardState() {
    for (int l = 0; l < kBlock; ++l) scale[l] = -kInf, re[l] = 0.0, im[l] = 0.0, stuck[l] = false;
  }
  complex_acc log_form(int l) const {
    if (stuck[l]) return {re[l], im[l]};
    if (scale[l] == -kInf || (re[l] == 0.0 && im[l] == 0.0)) return complex_log_zero<double>();
    return complex_acc{scale[l], 0.0} + complex_log(complex_acc{re[l], im[l]});
  }
  void set_log_form(int l, complex_acc L) {
    stuck[l] = has_nan(L) || L.real == kInf || !(std::fabs(L.imag) <= kMaxPhase);
    if (stuck[l]) {
      re[l] = L.real, im[l] = L.imag;
    } else if (L.real == -kInf) {
      scale[l] = -kInf, re[l] = 0.0, im[l] = 0.0;
    } else {
      scale[l] = L.real, re[l] = std::cos(L.imag), im[l] = std::sin(L.imag);
    }
  }
};

template <typename T>
struct BackwardChunk {
  const T *x, *out, *out_grad;
  T* x_grad;
  bool exclusive;

  template <int W>
  PE_VINLINE void chunk(const Block& blk, index_t k0, index_t steps, BackwardState& st) const {
    alignas(64) double xr[kSteps * kBlock], xi[kSteps * kBlock], gr[kSteps * kBlock], gi[kSteps * kBlock];
    alignas(64) double orr[kSteps * kBlock], oi[kSteps * kBlock], dr[kSteps * kBlock], di[kSteps * kBlock];
    blk.load(x, k0, steps, xr, xi);
    blk.load(out_grad, k0, steps, gr, gi);
    blk.load(out, k0, steps, orr, oi);
    const BackwardState carry = st;
    bool bad_lane[kBlock] = {};
    bool any_bad = false;
    for (int v = 0; v < kBlock / W; ++v) {
      const int o = v * W;
      // Stats: the largest and smallest -Re out of the terms that count (g != 0, Re out finite), the
      // largest Re x, and anything the linear form cannot take.
      vd<W> hi = simd::splat<W>(-kInf), lo = simd::splat<W>(kInf), xhi = simd::splat<W>(-kInf);
      vl<W> bad = vl<W>{};
      for (index_t k = 0; k < steps; ++k) {
        const index_t p = k * kBlock + o;
        const vd<W> r = load<W>(xr + p), i = load<W>(xi + p), a = load<W>(gr + p), b = load<W>(gi + p);
        const vd<W> orv = load<W>(orr + p), oiv = load<W>(oi + p);
        const vl<W> live = ((a != 0.0) | (b != 0.0)) & (vabs<W>(orv) < kInf);
        const vd<W> nv = simd::select<W>(live, -orv, simd::splat<W>(-kInf));
        hi = simd::vmax<W>(hi, nv);
        lo = simd::select<W>(live, simd::vmin<W>(lo, nv), lo);
        xhi = simd::vmax<W>(xhi, r);
        bad |= (r != r) | (r == kInf) | ~(vabs<W>(i) <= kMaxPhase) | ~(simd::vmax<W>(vabs<W>(a), vabs<W>(b)) <= kMaxGrad) |
               (orv != orv) | (oiv != oiv) | (live & (vabs<W>(oiv) > kMaxPhase));
      }
      const vd<W> Mc = load<W>(st.scale + o);
      const vd<W> M = simd::vmax<W>(hi, Mc);
      lo = simd::select<W>(Mc == -kInf, lo, simd::vmin<W>(lo, Mc));
      const vl<W> empty = M == -kInf;  // nothing counts yet: every grad is 0
      for (int l = 0; l < W; ++l) bad[l] |= st.stuck[o + l] ? -1 : 0;
      bad |= ~empty & ((M - lo > kMaxRange) | (xhi + M > 700.0));
      for (int l = 0; l < W; ++l) bad_lane[o + l] = bad[l] != 0, any_bad |= bad[l] != 0;
      const vd<W> Mz = simd::select<W>(empty, vd<W>{}, M);
      const vd<W> rescale = simd::select<W>(Mc == -kInf, vd<W>{}, simd::vexp_neg<W, true>(Mc - Mz));
      vd<W> Tr = load<W>(st.re + o) * rescale, Ti = load<W>(st.im + o) * rescale;
      for (index_t k = 0; k < steps; ++k) {
        const index_t p = k * kBlock + o;
        const vd<W> a = load<W>(gr + p), b = load<W>(gi + p), orv = load<W>(orr + p);
        const vl<W> live = ((a != 0.0) | (b != 0.0)) & (vabs<W>(orv) < kInf);
        // g exp(-conj(out) - M) = g e^(-Re out - M) (cos Im out + i sin Im out)
        const vd<W> e = simd::vexp_neg<W, true>(simd::select<W>(live, -orv - Mz, simd::splat<W>(-kInf)));
        vd<W> s, c;
        simd::vsincos<W>(simd::select<W>(live, load<W>(oi + p), vd<W>{}), s, c);
        const vd<W> wr = e * c, wi = e * s;
        const vd<W> tr = a * wr - b * wi, ti = a * wi + b * wr;
        if (!exclusive) Tr += tr, Ti += ti;
        // exp(conj(x) + M) T
        const vd<W> r = load<W>(xr + p);
        const vd<W> ex = simd::vexp<W, true>(r + Mz);  // Re x = -inf gives 0
        simd::vsincos<W>(load<W>(xi + p), s, c);
        const vd<W> ur = ex * c, ui = -(ex * s);
        const vl<W> zero = empty | (r == -kInf);
        simd::storeu<W>(dr + p, simd::select<W>(zero, vd<W>{}, ur * Tr - ui * Ti));
        simd::storeu<W>(di + p, simd::select<W>(zero, vd<W>{}, ur * Ti + ui * Tr));
        if (exclusive) Tr += tr, Ti += ti;
      }
      simd::storeu<W>(st.scale + o, M);
      simd::storeu<W>(st.re + o, Tr);
      simd::storeu<W>(st.im + o, Ti);
    }
    if (any_bad) scalar_lanes(bad_lane, carry, steps, xr, xi, gr, gi, orr, oi, dr, di, st);
    blk.store(x_grad, k0, steps, dr, di);
  }

  // The scalar scan of logcumsumexp_complex.h on the lanes the linear form could not take.
  PE_VINLINE void scalar_lanes(const bool* bad_lane, const BackwardState& carry, index_t steps, const double* xr,
                               const double* xi, const double* gr, const double* gi, const double* orr,
                               const double* oi, double* dr, double* di, BackwardState& st) const {
    for (int l = 0; l < kBlock; ++l) {
      if (!bad_lane[l]) continue;
      complex_acc L = carry.log_form(l);
      for (index_t k = 0; k < steps; ++k) {
        const index_t p = k * kBlock + l;
        const complex_acc term = logcumsumexp_complex_grad_term({gr[p], gi[p]}, {orr[p], oi[p]});
        if (!exclusive) L = complex_log_add_exp(L, term);
        const complex_acc value = logcumsumexp_complex_grad_value({xr[p], xi[p]}, L);
        if (exclusive) L = complex_log_add_exp(L, term);
        dr[p] = value.real;
        di[p] = value.imag;
      }
      st.set_log_form(l, L);
    }
  }
};

// simd::dispatch's kernel: tiles [t0, t1) of one direction.
template <typename Chunk, typename State>
struct Tiles {
  Chunk chunk;
  index_t lines, n, inner;
  bool reverse;
  template <int W>
  PE_VINLINE void run(index_t t0, index_t t1) const {
    State state[kColumnTile / kBlock];
    for_each_chunk<W>(chunk, t0, t1, lines, n, inner, reverse, state);
  }
};

template <typename Kernel>
void run_tiles(const Kernel& k, index_t outer, index_t n, index_t inner) {
  const index_t lines = outer * inner, tile = inner == 1 ? kBlock : kColumnTile;
  const index_t tiles = (lines + tile - 1) / tile;
  // ~32k elements per task at least (each ~5-10 ns)
  parallel_for_dynamic(0, tiles, std::max<index_t>(1, (index_t(1) << 15) / (tile * n)),
                       [&](int64_t t0, int64_t t1) { simd::dispatch_avx2(k, static_cast<index_t>(t0), static_cast<index_t>(t1)); });
}

}  // namespace

// The grad of x[j] gathers the outputs that j fed: the same scan in the opposite direction.
#define PE_DEFINE_COMPLEX_LAUNCHERS(T)                                                                           \
  template <>                                                                                                   \
  void logcumsumexp_forward<T>(const T* x, T* out, index_t outer, index_t n, index_t inner, bool exclusive,      \
                               bool reverse) {                                                                  \
    if (outer == 0 || n == 0 || inner == 0) return;                                                             \
    populate_for_write(out, sizeof(T) * outer * n * inner);                                                     \
    run_tiles(Tiles<ForwardChunk<T>, ForwardState>{{x, out, exclusive}, outer * inner, n, inner, reverse}, outer, \
              n, inner);                                                                                        \
  }                                                                                                             \
  template <>                                                                                                   \
  void logcumsumexp_backward<T>(const T* x, const T* out, const T* out_grad, T* x_grad, index_t outer, index_t n, \
                                index_t inner, bool exclusive, bool reverse) {                                  \
    if (outer == 0 || n == 0 || inner == 0) return;                                                             \
    populate_for_write(x_grad, sizeof(T) * outer * n * inner);                                                  \
    run_tiles(Tiles<BackwardChunk<T>, BackwardState>{{x, out, out_grad, x_grad, exclusive}, outer * inner, n,     \
                                                     inner, !reverse},                                          \
              outer, n, inner);                                                                                 \
  }
PE_DEFINE_COMPLEX_LAUNCHERS(complex<float>)
PE_DEFINE_COMPLEX_LAUNCHERS(complex<double>)
#undef PE_DEFINE_COMPLEX_LAUNCHERS

}  // namespace paddle_ext::cpu
