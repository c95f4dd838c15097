// CPU logcumsumexp: the entry points of rows.cc and columns.cc, called by the dispatcher (logcumsumexp.cc).
// `reverse` is the scan's direction (the backward's is the forward's opposite).
#pragma once

#include "paddle_ext/common.h"

namespace paddle_ext::cpu {

template <typename T>
void forward_rows(const T* x, T* out, index_t outer, index_t n, bool exclusive, bool reverse);
template <typename T>
void backward_rows(const T* x, const T* out, const T* out_grad, T* x_grad, index_t outer, index_t n, bool exclusive,
                   bool reverse);
template <typename T>
void forward_columns(const T* x, T* out, index_t outer, index_t n, index_t inner, bool exclusive, bool reverse);
template <typename T>
void backward_columns(const T* x, const T* out, const T* out_grad, T* x_grad, index_t outer, index_t n, index_t inner,
                      bool exclusive, bool reverse);

}  // namespace paddle_ext::cpu
