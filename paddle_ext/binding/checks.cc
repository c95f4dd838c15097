// pe_check_index: the value check the Python APIs do in dygraph, as an op for static graphs.
#include "paddle_ext/binding/common.h"

namespace paddle_ext {

namespace {
template <typename T>
void check_range(const paddle::Tensor& host, int64_t low, int64_t high, const std::string& what) {
  const T* v = host.data<T>();
  for (int64_t i = 0; i < host.numel(); ++i)
    if (v[i] < low || v[i] >= high)
      PE_THROW_INDEX(what, "[", i, "] = ", static_cast<int64_t>(v[i]), " is out of range [", low, ", ", high, ")");
}
}  // namespace

std::vector<paddle::Tensor> CheckIndexKernel(const paddle::Tensor& x, int64_t low, int64_t high,
                                             const std::string& what) {
  // A device tensor is checked on a host copy: this op sits where Python cannot look (static graphs),
  // and a synchronising copy of a label or index vector is cheap next to the op it guards.
  const paddle::Tensor host = x.is_cpu() ? dense(x) : x.copy_to(paddle::CPUPlace(), true);
  switch (x.dtype()) {
    case paddle::DataType::INT64: check_range<int64_t>(host, low, high, what); break;
    case paddle::DataType::INT32: check_range<int32_t>(host, low, high, what); break;
    default: PE_THROW(what, ": expected an int32 or int64 tensor, got ", phi::DataTypeToString(x.dtype()));
  }
  return {x.copy_to(x.place(), false)};
}

}  // namespace paddle_ext
