// CPU logcumsumexp on raw pointers (no Paddle header): the dispatcher. Contiguous rows: rows.cc; a strided
// axis: columns.cc; the scan pieces both use: scan.h.
#include "entries.h"
#include "paddle_ext/logcumsumexp.h"
#include "paddle_ext/parallel.h"

namespace paddle_ext::cpu {

template <typename T>
void logcumsumexp_forward(const T* x, T* out, index_t outer, index_t n, index_t inner, bool exclusive,
                          bool reverse) {
  if (outer == 0 || n == 0 || inner == 0) return;
  populate_for_write(out, sizeof(T) * outer * n * inner);
  if (inner == 1) forward_rows(x, out, outer, n, exclusive, reverse);
  else forward_columns(x, out, outer, n, inner, exclusive, reverse);
}

template <typename T>
void logcumsumexp_backward(const T* x, const T* out, const T* out_grad, T* x_grad, index_t outer, index_t n,
                           index_t inner, bool exclusive, bool reverse) {
  if (outer == 0 || n == 0 || inner == 0) return;
  populate_for_write(x_grad, sizeof(T) * outer * n * inner);
  // The grad of x[j] collects the outputs that j fed, so it runs in the opposite direction.
  if (inner == 1) backward_rows(x, out, out_grad, x_grad, outer, n, exclusive, !reverse);
  else backward_columns(x, out, out_grad, x_grad, outer, n, inner, exclusive, !reverse);
}

#define PE_INSTANTIATE(T)                                                                    \
  template void logcumsumexp_forward<T>(const T*, T*, index_t, index_t, index_t, bool, bool); \
  template void logcumsumexp_backward<T>(const T*, const T*, const T*, T*, index_t, index_t,  \
                                         index_t, bool, bool);
PE_FOR_FLOAT_TYPES(PE_INSTANTIATE)
#undef PE_INSTANTIATE

}  // namespace paddle_ext::cpu
