// CPU logcumsumexp along a strided axis (inner > 1): the linear form of scan.h with one column per lane,
// neighbouring columns and several steps at a time, so that every step reads contiguous memory.
#include "entries.h"
#include "scan.h"

#pragma GCC diagnostic ignored "-Wpsabi"  // wide vectors pass between always_inline functions (vec_math.h)

namespace paddle_ext::cpu {
namespace {

// W floats <-> W doubles.
template <int W>
PE_VINLINE vd<W> load_half_d(const float* p) {
  typename FV<W>::vhalf h;
  std::memcpy(&h, p, sizeof(h));
  return __builtin_convertvector(h, vd<W>);
}
template <int W>
PE_VINLINE void store_half_d(float* p, vd<W> v) {
  const typename FV<W>::vhalf h = __builtin_convertvector(v, typename FV<W>::vhalf);
  std::memcpy(p, &h, sizeof(h));
}

// A block of `steps` steps of one lane group (2W neighbouring columns; row k at xs + k * xst, its
// outputs at os + k * ost) in double lanes, from the per-column log carries; exact, as the double
// kernels (NaN/+inf and wide ranges per lane by LogSumAcc).
template <int W, bool kExclusive>
PE_VINLINE void column_block_d(const float* xs, index_t xst, float* os, index_t ost, index_t steps, double* carry) {
  for (int half = 0; half < 2; ++half) {
    const int off = half * W;
    vd<W> hi = simd::splat<W>(-kInf), lo = simd::splat<W>(kInf), check = vd<W>{};
    for (index_t k = 0; k < steps; ++k) {
      const vd<W> v = load_half_d<W>(xs + k * xst + off);
      check += v;
      hi = simd::vmax<W>(hi, v);
      lo = simd::select<W>(v == -kInf, lo, simd::vmin<W>(lo, v));
    }
    const vd<W> Lc = simd::loadu<W>(carry + off);
    const vd<W> M = simd::vmax<W>(hi, Lc);
    lo = simd::select<W>(Lc == -kInf, lo, simd::vmin<W>(lo, Lc));
    const vl<W> wide = (M - lo > kMaxRange) & (M > -kInf);
    const vl<W> bad = (check != check) | (check == kInf) | (Lc != Lc) | (Lc == kInf) | wide;
    if (simd::any<W>(bad)) {
      for (int l = 0; l < W; ++l) {
        LogSumAcc<double> acc = acc_from_log(carry[off + l]);
        for (index_t k = 0; k < steps; ++k) {
          const double v = xs[k * xst + off + l];
          if (kExclusive) os[k * ost + off + l] = static_cast<float>(acc.value());
          acc.add(v);
          if (!kExclusive) os[k * ost + off + l] = static_cast<float>(acc.value());
        }
        carry[off + l] = acc.value();
      }
      continue;
    }
    const vl<W> empty = M == -kInf;  // nothing but -inf so far: c stays 0, outputs -inf
    vd<W> c = simd::select<W>(empty, vd<W>{}, simd::vexp_neg<W, true>(Lc - M));
    for (index_t k = 0; k < steps; ++k) {
      const vd<W> e = simd::select<W>(empty, vd<W>{}, simd::vexp_neg<W, true>(load_half_d<W>(xs + k * xst + off) - M));
      if (!kExclusive) c += e;
      store_half_d<W>(os + k * ost + off, M + simd::vlog<W, true>(c));  // c == 0 gives -inf
      if (kExclusive) c += e;
    }
    simd::storeu<W>(carry + off, M + simd::vlog<W, true>(c));
  }
}

// The same block in float lanes: per column M = the max of the block and the carry, then
// s = exp(carry - M) + t with t the block's running float sum of exp(x - M) (the carry and t are
// combined in double at the block's end, so rounding does not compound from block to block), and
// out = M + log(s). Returns false (carry untouched) for NaN/+inf, a range too wide for float exps,
// or an output the error bound rejects; the caller then redoes the block (or the column group) in
// double.
template <int W, bool kExclusive>
PE_VINLINE bool column_block_f(const float* xs, index_t xst, float* os, index_t ost, index_t steps, double* carry) {
  using F = FV<W>;
  using vf = typename F::vf;
  using vi = typename F::vi;
  vf hi = F::splat(-kInf), lo = F::splat(kInf), check = vf{};
  for (index_t k = 0; k < steps; ++k) {
    const vf v = F::load(xs + k * xst);
    check += v;
    hi = F::vmax(hi, v);
    lo = F::select(v == -kInf, lo, F::vmin(lo, v));
  }
  const vd<W> cl = simd::loadu<W>(carry), ch = simd::loadu<W>(carry + W);
  const vf Lc = F::from_d(cl, ch);  // rounded: only the choice of M and the range test see it
  const vf M = F::vmax(hi, Lc);
  lo = F::select(Lc == -kInf, lo, F::vmin(lo, Lc));
  const vi bad = (check != check) | (check == kInf) | (Lc != Lc) | (Lc == kInf) | ((M - lo > 80.0f) & (M > -kInf)) |
                 (F::vabs(M) > 1e30f & (M != -kInf));
  if (F::any(bad)) return false;
  const vf Mz = F::select(M == -kInf, vf{}, M);  // an empty column: every term and the carry are 0
  const vd<W> Ml = F::lo_d(Mz), Mh = F::hi_d(Mz);
  const vd<W> Cl = simd::vexp_neg<W, false>(cl - Ml), Ch = simd::vexp_neg<W, false>(ch - Mh);  // -inf gives 0
  const vf C = F::from_d(Cl, Ch);
  vf t = vf{};
  vi unsafe = vi{};
  for (index_t k = 0; k < steps; ++k) {
    const vf e = F::exp_neg(F::load(xs + k * xst) - Mz);
    if (!kExclusive) t += e;
    const vf l = F::log(C + t);
    const vf o = Mz + l;
    unsafe |= float_unsafe<W>(o, l, 16.0f);
    F::store(os + k * ost, o);
    if (kExclusive) t += e;
  }
  if (F::any(unsafe)) return false;
  simd::storeu<W>(carry, Ml + simd::vlog<W, false>(Cl + F::lo_d(t)));  // C + t == 0: -inf
  simd::storeu<W>(carry + W, Mh + simd::vlog<W, false>(Ch + F::hi_d(t)));
  return true;
}

// A block of columns of one outer slice of a strided axis (task t: columns [c0, c0 + kColumns)), in
// the rows' linear form with one column per lane: kSteps steps are gathered, each lane gets its max M
// over them (and its carry), then c += exp(x - M) and out = M + log(c) step by step. A lane-vector with
// NaN/+inf, or a range too wide for exp(x - M), takes LogSumAcc for those steps.
template <typename T>
struct ForwardColumns {
  const T* x;
  T* out;
  index_t n, inner;
  bool exclusive, reverse;

  static constexpr bool kFull = sizeof(T) == 8;  // double: full precision; narrower outputs: ~1e-13
  static constexpr index_t kSteps = 16;
  // Columns per task: float lanes take a whole 4 KiB page of each row (fewer, longer hardware-prefetch
  // streams).
  static constexpr index_t kWidth = kFull ? kColumns : 1024;

  // Float lanes (float32 and narrower): lane groups of 2W columns. A group is `exact` until its first
  // float block; a block that float cannot do is redone in double while the group is exact, and
  // otherwise the group is rescanned in double from step 0 and stays in double.
  template <int W>
  PE_VINLINE void run_f(index_t t0, index_t t1) const {
    constexpr int L = 2 * W;
    constexpr index_t kGroups = kWidth / L;
    alignas(64) double carry[kWidth];
    alignas(64) float bx[kSteps * L], bo[kSteps * L];
    unsigned char mode[kGroups];  // 0: exact, 1: float rounding in the carry, 2: double from now on
    const index_t blocks = (inner + kWidth - 1) / kWidth;
    for (index_t t = t0; t < t1; ++t) {
      const index_t o = t / blocks, c0 = (t % blocks) * kWidth;
      const index_t w = std::min(kWidth, inner - c0), groups = (w + L - 1) / L;
      std::fill(carry, carry + groups * L, -kInf);
      std::fill(mode, mode + groups, 0);
      for (index_t step0 = 0; step0 < n; step0 += kSteps) {
        const index_t steps = std::min(kSteps, n - step0);
        for (index_t g = 0; g < groups; ++g) {
          const index_t c = c0 + g * L, lanes = std::min<index_t>(L, w - g * L);
          const index_t row0 = o * n + (reverse ? n - 1 - step0 : step0);
          const index_t dir = reverse ? -1 : 1;  // rows of successive steps
          const bool direct = std::is_same<T, float>::value && lanes == L;  // read and write the tensors in place
          const float* xs = bx;
          float* os = bo;
          index_t xst = L, ost = L;
          if (direct) {
            xs = reinterpret_cast<const float*>(x) + row0 * inner + c;
            os = reinterpret_cast<float*>(out) + row0 * inner + c;
            xst = ost = dir * inner;
          } else {
            gather_block<W>(row0, dir, c, lanes, steps, bx);
          }
          double* cg = carry + g * L;
          bool done = false;
          if (mode[g] != 2) {
            done = exclusive ? column_block_f<W, true>(xs, xst, os, ost, steps, cg)
                             : column_block_f<W, false>(xs, xst, os, ost, steps, cg);
            if (done) mode[g] = 1;
          }
          if (!done && mode[g] == 1) {  // rescan the group from step 0 in double
            std::fill(cg, cg + L, -kInf);
            for (index_t s0 = 0; s0 < step0; s0 += kSteps) {
              const index_t r0 = o * n + (reverse ? n - 1 - s0 : s0);
              gather_block<W>(r0, dir, c, lanes, kSteps, bx);
              exclusive ? column_block_d<W, true>(bx, L, bo, L, kSteps, cg) : column_block_d<W, false>(bx, L, bo, L, kSteps, cg);
              scatter_block<W>(r0, dir, c, lanes, kSteps, bo);
            }
            if (!direct) gather_block<W>(row0, dir, c, lanes, steps, bx);  // bx held earlier blocks
            mode[g] = 2;
          }
          if (!done) {
            exclusive ? column_block_d<W, true>(xs, xst, os, ost, steps, cg)
                      : column_block_d<W, false>(xs, xst, os, ost, steps, cg);
          }
          if (!direct) scatter_block<W>(row0, dir, c, lanes, steps, bo);
        }
      }
    }
  }

  // Rows row0 + k * dir (k < steps), columns [c, c + lanes), as float into buf[k * 2W + l] (padded
  // with -inf), and back.
  template <int W>
  PE_VINLINE void gather_block(index_t row0, index_t dir, index_t c, index_t lanes, index_t steps, float* buf) const {
    constexpr int L = 2 * W;
    using S = Storage<T>;
    for (index_t k = 0; k < steps; ++k) {
      const typename S::type* row = reinterpret_cast<const typename S::type*>(x) + (row0 + k * dir) * inner + c;
      float* b = buf + k * L;
      index_t l = 0;
      if (sizeof(T) == 2 && lanes == L) {
        typename Vec16<L>::vh h;
        std::memcpy(&h, row, sizeof(h));
        const typename Vec16<L>::vf f = Vec16<L>::to_float(h, std::is_same<T, float16_t>::value);
        std::memcpy(b, &f, sizeof(f));
        l = L;
      }
      for (; l < lanes; ++l) b[l] = static_cast<float>(S::to_double(row[l]));
      for (; l < L; ++l) b[l] = -std::numeric_limits<float>::infinity();
    }
  }
  template <int W>
  PE_VINLINE void scatter_block(index_t row0, index_t dir, index_t c, index_t lanes, index_t steps,
                                const float* buf) const {
    constexpr int L = 2 * W;
    using S = Storage<T>;
    for (index_t k = 0; k < steps; ++k) {
      typename S::type* row = reinterpret_cast<typename S::type*>(out) + (row0 + k * dir) * inner + c;
      const float* b = buf + k * L;
      index_t l = 0;
      if (sizeof(T) == 2 && lanes == L) {
        typename Vec16<L>::vf f;
        std::memcpy(&f, b, sizeof(f));
        const typename Vec16<L>::vh h = Vec16<L>::from_float(f, std::is_same<T, float16_t>::value);
        std::memcpy(row, &h, sizeof(h));
        l = L;
      }
      for (; l < lanes; ++l) row[l] = S::from_double(b[l]);
    }
  }

  template <int W>
  PE_VINLINE void run(index_t t0, index_t t1) const {
    if constexpr (!kFull) {
      run_f<W>(t0, t1);
      return;
    }
    alignas(64) double carry[kColumns], buf[kSteps][kColumns];
    const index_t blocks = (inner + kColumns - 1) / kColumns;
    for (index_t t = t0; t < t1; ++t) {
      const index_t o = t / blocks, c0 = (t % blocks) * kColumns;
      const index_t w = std::min(kColumns, inner - c0), wp = (w + W - 1) / W * W;
      std::fill(carry, carry + wp, -kInf);
      for (index_t step0 = 0; step0 < n; step0 += kSteps) {
        const index_t steps = std::min(kSteps, n - step0);
        for (index_t k = 0; k < steps; ++k) {
          const index_t row = o * n + (reverse ? n - 1 - (step0 + k) : step0 + k);
          gather<W>(x + row * inner + c0, w, 0, w, false, buf[k], -kInf);
        }
        for (index_t i = 0; i < wp; i += W) {
          vd<W> hi = simd::splat<W>(-kInf), lo = simd::splat<W>(kInf), check = vd<W>{};
          for (index_t k = 0; k < steps; ++k) {
            const vd<W> v = simd::loadu<W>(buf[k] + i);
            check += v;  // NaN or +inf shows
            hi = simd::vmax<W>(hi, v);
            lo = simd::select<W>(v == -kInf, lo, simd::vmin<W>(lo, v));
          }
          const vd<W> L = simd::loadu<W>(carry + i);
          const vd<W> M = simd::vmax<W>(hi, L);
          lo = simd::select<W>(L == -kInf, lo, simd::vmin<W>(lo, L));
          const vl<W> wide = (M - lo > kMaxRange) & (M > -kInf);
          const vl<W> bad = (check != check) | (check == kInf) | (L != L) | (L == kInf) | wide;
          if (simd::any<W>(bad)) {
            for (int l = 0; l < W; ++l) {
              LogSumAcc<double> acc = acc_from_log(carry[i + l]);
              for (index_t k = 0; k < steps; ++k) {
                const double v = buf[k][i + l];
                if (exclusive) buf[k][i + l] = acc.value();
                acc.add(v);
                if (!exclusive) buf[k][i + l] = acc.value();
              }
              carry[i + l] = acc.value();
            }
            continue;
          }
          const vl<W> empty = M == -kInf;  // nothing but -inf so far: c stays 0, outputs -inf
          vd<W> c = simd::select<W>(empty, vd<W>{}, simd::vexp_neg<W, kFull>(L - M));
          for (index_t k = 0; k < steps; ++k) {
            const vd<W> e = simd::select<W>(empty, vd<W>{}, simd::vexp_neg<W, kFull>(simd::loadu<W>(buf[k] + i) - M));
            if (!exclusive) c += e;
            simd::storeu<W>(buf[k] + i, M + simd::vlog<W, kFull>(c));  // c == 0 gives -inf
            if (exclusive) c += e;
          }
          simd::storeu<W>(carry + i, M + simd::vlog<W, kFull>(c));
        }
        for (index_t k = 0; k < steps; ++k) {
          const index_t row = o * n + (reverse ? n - 1 - (step0 + k) : step0 + k);
          scatter<W>(buf[k], w, 0, w, false, out + row * inner + c0);
        }
      }
    }
  }
};

// The column backward in the same linear form, one column per lane: the lane's carry is rescaled to
// the newest -out at each step (exp of minus the difference), so two exps per element. Lanes go over to
// the scalar path, for good, at the first NaN/+inf of their block.
template <typename T>
struct BackwardColumns {
  const T *x, *out, *out_grad;
  T* x_grad;
  index_t n, inner;
  bool exclusive, reverse;  // reverse: the backward scan direction

  static constexpr bool kFull = sizeof(T) == 8;

  // One step of every lane: the grads of bx (in place), the carries (sum, scale) updated.
  template <int W, bool kExclusive>
  PE_VINLINE static void lanes_step(double* bx, const double* bg, const double* bo, double* sum, double* scale,
                                    index_t wp) {
    for (index_t i = 0; i < wp; i += W) {
      const vd<W> xv = simd::loadu<W>(bx + i), g = simd::loadu<W>(bg + i), ov = simd::loadu<W>(bo + i);
      vd<W> sv = simd::loadu<W>(sum + i), mv = simd::loadu<W>(scale + i);
      const vl<W> live = (g != 0.0) & (ov > -kInf);
      const vd<W> v = simd::select<W>(live, -ov, simd::splat<W>(-kInf));
      // One exp serves both: the carry's rescale (v above the scale) or the new term's (below).
      const vl<W> up = v > mv;
      const vd<W> e = simd::vexp_neg<W, kFull>(simd::select<W>(up, mv - v, v - mv));  // -inf - -inf: NaN,
      const vd<W> term = simd::select<W>(live, g * simd::select<W>(up, simd::splat<W>(1.0), e), vd<W>{});
      // x <= out of every output x feeds, so exp(x + scale) <= 1 at the scale of those outputs
      // only: exclusive reads the carry before this step's output joins it (x may exceed that
      // out: exp(x - out) can overflow, or the rescaled carry underflow to 0 under it).
      if (kExclusive) simd::storeu<W>(bx + i, simd::vexp<W, kFull>(xv + mv) * sv);  // scale -inf: 0 * 0
      sv = simd::select<W>(up, sv * e, sv);  // ... only where neither lane side is used
      mv = simd::vmax<W>(mv, v);
      sv += term;
      if (!kExclusive) simd::storeu<W>(bx + i, simd::vexp<W, kFull>(xv + mv) * sv);
      simd::storeu<W>(sum + i, sv);
      simd::storeu<W>(scale + i, mv);
    }
  }

  template <int W>
  PE_VINLINE void run(index_t t0, index_t t1) const {
    alignas(64) double sum[kColumns], scale[kColumns], bx[kColumns], bg[kColumns], bo[kColumns];
    LogSumAcc<double> pos[kColumns], neg[kColumns];
    const index_t blocks = (inner + kColumns - 1) / kColumns;
    for (index_t t = t0; t < t1; ++t) {
      const index_t o = t / blocks, c0 = (t % blocks) * kColumns;
      const index_t w = std::min(kColumns, inner - c0), wp = (w + W - 1) / W * W;
      std::fill(sum, sum + wp, 0.0);
      std::fill(scale, scale + wp, -kInf);
      bool clean = true;
      for (index_t step = 0; step < n; ++step) {
        const index_t offset = (o * n + (reverse ? n - 1 - step : step)) * inner + c0;
        gather<W>(x + offset, w, 0, w, false, bx, -kInf);
        gather<W>(out_grad + offset, w, 0, w, false, bg, 0.0);
        gather<W>(out + offset, w, 0, w, false, bo, -kInf);
        if (clean && !(no_nan_or_pos_inf<W>(bx, wp) && all_finite<W>(bg, wp) && no_nan_or_pos_inf<W>(bo, wp))) {
          clean = false;
          for (index_t l = 0; l < wp; ++l) carry_to_accs(LinearCarry{sum[l], scale[l]}, pos[l], neg[l]);
        }
        if (!clean) {
          for (index_t l = 0; l < w; ++l) bx[l] = backward_step(bx[l], bg[l], bo[l], pos[l], neg[l], exclusive);
        } else {
          exclusive ? lanes_step<W, true>(bx, bg, bo, sum, scale, wp) : lanes_step<W, false>(bx, bg, bo, sum, scale, wp);
        }
        scatter<W>(bx, w, 0, w, false, x_grad + offset);
      }
    }
  }
};

}  // namespace

template <typename T>
void forward_columns(const T* x, T* out, index_t outer, index_t n, index_t inner, bool exclusive, bool reverse) {
  const ForwardColumns<T> k{x, out, n, inner, exclusive, reverse};
  constexpr index_t width = ForwardColumns<T>::kWidth;
  const index_t tasks = outer * ((inner + width - 1) / width);
  parallel_for_dynamic(0, tasks, grain_for(n * std::min(inner, width)),
                       [&](index_t t0, index_t t1) { simd::dispatch(k, t0, t1); });
}

template <typename T>
void backward_columns(const T* x, const T* out, const T* out_grad, T* x_grad, index_t outer, index_t n, index_t inner,
                      bool exclusive, bool reverse) {
  const BackwardColumns<T> k{x, out, out_grad, x_grad, n, inner, exclusive, reverse};
  const index_t tasks = outer * ((inner + kColumns - 1) / kColumns);
  parallel_for_dynamic(0, tasks, grain_for(n * std::min(inner, kColumns)),
                       [&](index_t t0, index_t t1) { simd::dispatch(k, t0, t1); });
}

#define PE_INSTANTIATE(T)                                                                                    \
  template void forward_columns<T>(const T*, T*, index_t, index_t, index_t, bool, bool);                     \
  template void backward_columns<T>(const T*, const T*, const T*, T*, index_t, index_t, index_t, bool, bool);
PE_FOR_FLOAT_TYPES(PE_INSTANTIATE)
#undef PE_INSTANTIATE

}  // namespace paddle_ext::cpu
