// mutual_information: validation and CPU/GPU dispatch. Registered by build/generated/mutual_information.ops.cc
// (generated from ops/mutual_information.yaml), which includes this file.
#include "paddle_ext/mutual_information.h"

#include "paddle_ext/binding/common.h"

namespace paddle_ext {
namespace {

struct MIShape {
  int64_t B, S, T;
  bool modified;
};

// The Python API has already checked all of this with clear Python exceptions.
MIShape mi_shape(const paddle::Tensor& px, const paddle::Tensor& py, const paddle::optional<paddle::Tensor>& boundary,
                 const char* op) {
  PE_CHECK(px.shape().size() == 3 && py.shape().size() == 3, op, ": px and py must be 3-D");
  const int64_t B = px.shape()[0], S = px.shape()[1], T = py.shape()[2];
  PE_CHECK(py.shape()[0] == B && py.shape()[1] == S + 1, op, ": py must have shape [B, S+1, T]");
  PE_CHECK(px.shape()[2] == T || px.shape()[2] == T + 1, op, ": px must have shape [B, S, T+1] or [B, S, T]");
  PE_CHECK(px.dtype() == py.dtype(), op, ": px and py must have the same dtype");
  check_same_place(px, py, op, "px", "py");
  if (boundary) {
    PE_CHECK(boundary->dtype() == paddle::DataType::INT64, op, ": boundary must be int64");
    PE_CHECK(boundary->shape() == std::vector<int64_t>({B, 4}), op, ": boundary must have shape [B, 4]");
    check_same_place(px, *boundary, op, "px", "boundary");
  }
  return {B, S, T, px.shape()[2] == T};
}

const int64_t* boundary_ptr(const paddle::optional<paddle::Tensor>& boundary, paddle::Tensor* holder,
                            const MIShape& m, const char* op) {
  if (!boundary) return nullptr;
  *holder = dense(*boundary);
  const int64_t* ptr = holder->data<int64_t>();
  if (holder->is_cpu()) {  // on a GPU the kernel skips a bad row (ans = NaN) instead of reading out of bounds
    const index_t bad = cpu::mutual_information_check_boundary(ptr, m.B, m.S, m.T);
    if (bad >= 0) {
      const int64_t* r = ptr + 4 * bad;
      PE_THROW(op, ": boundary row ", bad, " = [", r[0], ", ", r[1], ", ", r[2], ", ", r[3],
               "] breaks 0 <= s_begin <= s_end <= S, 0 <= t_begin <= t_end <= T (S = ", m.S, ", T = ", m.T, ")");
    }
  }
  return ptr;
}

std::vector<paddle::Tensor> run_backward(const paddle::Tensor& px_in, const paddle::Tensor& py_in,
                                         const paddle::optional<paddle::Tensor>& boundary, const paddle::Tensor& p_in,
                                         const paddle::Tensor* ans_grad_in, const char* op) {
  const paddle::Tensor px = dense(px_in), py = dense(py_in), p = dense(p_in);
  const MIShape m = mi_shape(px, py, boundary, op);
  PE_CHECK(p.shape() == std::vector<int64_t>({m.B, m.S + 1, m.T + 1}) && p.dtype() == paddle::DataType::FLOAT64, op,
           ": p must be float64 of shape [B, S+1, T+1]");
  paddle::Tensor bholder, ans_grad;
  const int64_t* bptr = boundary_ptr(boundary, &bholder, m, op);
  if (ans_grad_in != nullptr) {
    ans_grad = dense(*ans_grad_in);
    PE_CHECK(ans_grad.numel() == m.B, op, ": ans_grad must have B elements");
  }
  paddle::Tensor px_grad = new_output(px.shape(), px.dtype(), px.place());
  paddle::Tensor py_grad = new_output(py.shape(), py.dtype(), py.place());
  dispatch_float_double(px.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* ag = ans_grad_in != nullptr ? ptr<T>(ans_grad) : nullptr;
    if (px.is_cpu()) {
      cpu::mutual_information_backward<T>(ptr<T>(px), ptr<T>(py), bptr, ptr<mi_acc_t>(p), ag, mutable_ptr<T>(px_grad),
                                          mutable_ptr<T>(py_grad), m.B, m.S, m.T, m.modified);
    } else {
#ifdef PADDLE_EXT_WITH_CUDA
      gpu::mutual_information_backward<T>(ptr<T>(px), ptr<T>(py), bptr, ptr<mi_acc_t>(p), ag, mutable_ptr<T>(px_grad),
                                          mutable_ptr<T>(py_grad), m.B, m.S, m.T, m.modified, px.stream());
#else
      throw_no_cuda(op);
#endif
    }
  });
  return {px_grad, py_grad};
}

}  // namespace

std::vector<std::vector<int64_t>> MutualInformationInferShape(const std::vector<int64_t>& px_shape,
                                                              const std::vector<int64_t>& py_shape,
                                                              const paddle::optional<std::vector<int64_t>>&) {
  PE_CHECK(px_shape.size() == 3 && py_shape.size() == 3, "mutual_information: px and py must be 3-D");
  const int64_t B = px_shape[0], S1 = py_shape[1], T = py_shape[2];
  return {{B}, {B, S1, T < 0 ? -1 : T + 1}};
}

std::vector<paddle::DataType> MutualInformationInferDtype(const paddle::DataType& px, const paddle::DataType&,
                                                         const paddle::optional<paddle::DataType>&) {
  return {px, paddle::DataType::FLOAT64};
}

std::vector<std::vector<int64_t>> MutualInformationOccupationInferShape(
    const std::vector<int64_t>& px_shape, const std::vector<int64_t>& py_shape,
    const paddle::optional<std::vector<int64_t>>&, const std::vector<int64_t>&) {
  return {px_shape, py_shape};
}

std::vector<paddle::Tensor> MutualInformationKernel(const paddle::Tensor& px_in, const paddle::Tensor& py_in,
                                                    const paddle::optional<paddle::Tensor>& boundary) {
  const char* op = "mutual_information";
  const paddle::Tensor px = dense(px_in), py = dense(py_in);
  const MIShape m = mi_shape(px, py, boundary, op);
  paddle::Tensor bholder;
  const int64_t* bptr = boundary_ptr(boundary, &bholder, m, op);
  paddle::Tensor ans = new_output({m.B}, px.dtype(), px.place());
  paddle::Tensor p = new_output({m.B, m.S + 1, m.T + 1}, paddle::DataType::FLOAT64, px.place());
  dispatch_float_double(px.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (px.is_cpu()) {
      cpu::mutual_information_forward<T>(ptr<T>(px), ptr<T>(py), bptr, mutable_ptr<mi_acc_t>(p), mutable_ptr<T>(ans), m.B,
                                         m.S, m.T, m.modified);
    } else {
#ifdef PADDLE_EXT_WITH_CUDA
      gpu::mutual_information_forward<T>(ptr<T>(px), ptr<T>(py), bptr, mutable_ptr<mi_acc_t>(p), mutable_ptr<T>(ans), m.B,
                                         m.S, m.T, m.modified, px.stream());
#else
      throw_no_cuda(op);
#endif
    }
  });
  return {ans, p};
}

std::vector<paddle::Tensor> MutualInformationGradKernel(const paddle::Tensor& px, const paddle::Tensor& py,
                                                        const paddle::optional<paddle::Tensor>& boundary,
                                                        const paddle::Tensor& p, const paddle::Tensor& ans_grad) {
  return run_backward(px, py, boundary, p, &ans_grad, "mutual_information_grad");
}

std::vector<paddle::Tensor> MutualInformationOccupationKernel(const paddle::Tensor& px, const paddle::Tensor& py,
                                                              const paddle::optional<paddle::Tensor>& boundary,
                                                              const paddle::Tensor& p) {
  return run_backward(px, py, boundary, p, nullptr, "mutual_information_occupation");
}

// ---------------------------------------------------------------------------------------------------
// joint_mutual_information_recursion: px [N, B, S, T1] and py [N, B, S+1, T], the terms stacked. The recursion
// runs on their sums; out [N, B] and the occupations (kept for the grad) as the header describes.

namespace {

struct JointShape {
  int64_t N;
  std::vector<int64_t> x, y;  // one term's shapes
};

JointShape joint_shape(const std::vector<int64_t>& px, const std::vector<int64_t>& py, const char* op) {
  PE_CHECK(px.size() == 4 && py.size() == 4, op, ": px and py must be 4-D (the terms stacked), got ranks ",
           px.size(), " and ", py.size());
  PE_CHECK(px[0] < 0 || py[0] < 0 || px[0] == py[0], op, ": px and py must stack as many terms, got ", px[0],
           " and ", py[0]);
  return {px[0], {px.begin() + 1, px.end()}, {py.begin() + 1, py.end()}};
}

}  // namespace

std::vector<std::vector<int64_t>> JointMutualInformationInferShape(const std::vector<int64_t>& px_shape,
                                                                   const std::vector<int64_t>& py_shape,
                                                                   const paddle::optional<std::vector<int64_t>>&) {
  const JointShape j = joint_shape(px_shape, py_shape, "joint_mutual_information");
  return {{j.N, j.x[0]}, j.x, j.y};
}

std::vector<paddle::Tensor> JointMutualInformationKernel(const paddle::Tensor& px_in, const paddle::Tensor& py_in,
                                                         const paddle::optional<paddle::Tensor>& boundary) {
  const char* op = "joint_mutual_information";
  const paddle::Tensor px = dense(px_in), py = dense(py_in);
  const JointShape j = joint_shape(px.shape(), py.shape(), op);
  PE_CHECK(j.N >= 1, op, ": px and py must stack at least one term");
  paddle::Tensor x_tot = new_output(j.x, px.dtype(), px.place()), y_tot = new_output(j.y, py.dtype(), py.place());
  const MIShape m = mi_shape(x_tot, y_tot, boundary, op);
  check_same_place(px, py, op, "px", "py");
  paddle::Tensor bholder;
  const int64_t* bptr = boundary_ptr(boundary, &bholder, m, op);
  const int64_t cx = numel_of(j.x) / std::max<int64_t>(1, m.B), cy = numel_of(j.y) / std::max<int64_t>(1, m.B);
  paddle::Tensor out = new_output({j.N, m.B}, px.dtype(), px.place());
  paddle::Tensor ans = new_output({m.B}, px.dtype(), px.place());
  paddle::Tensor p = new_output({m.B, m.S + 1, m.T + 1}, paddle::DataType::FLOAT64, px.place());
  paddle::Tensor occ_x = new_output(j.x, px.dtype(), px.place()), occ_y = new_output(j.y, py.dtype(), py.place());
  dispatch_float_double(px.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T *xt = mutable_ptr<T>(x_tot), *yt = mutable_ptr<T>(y_tot);
    if (px.is_cpu()) {
      cpu::joint_mutual_information_sum<T>(ptr<T>(px), xt, j.N, m.B * cx);
      cpu::joint_mutual_information_sum<T>(ptr<T>(py), yt, j.N, m.B * cy);
      cpu::mutual_information_forward<T>(xt, yt, bptr, mutable_ptr<mi_acc_t>(p), mutable_ptr<T>(ans), m.B, m.S, m.T,
                                         m.modified);
      cpu::mutual_information_backward<T>(xt, yt, bptr, ptr<mi_acc_t>(p), nullptr, mutable_ptr<T>(occ_x),
                                          mutable_ptr<T>(occ_y), m.B, m.S, m.T, m.modified);
      cpu::joint_mutual_information_rows<T>(ptr<T>(px), ptr<T>(py), ptr<T>(occ_x), ptr<T>(occ_y), ptr<T>(ans),
                                            mutable_ptr<T>(out), j.N, m.B, cx, cy);
    } else {
#ifdef PADDLE_EXT_WITH_CUDA
      const auto stream = px.stream();
      gpu::joint_mutual_information_sum<T>(ptr<T>(px), xt, j.N, m.B * cx, stream);
      gpu::joint_mutual_information_sum<T>(ptr<T>(py), yt, j.N, m.B * cy, stream);
      gpu::mutual_information_forward<T>(xt, yt, bptr, mutable_ptr<mi_acc_t>(p), mutable_ptr<T>(ans), m.B, m.S, m.T,
                                         m.modified, stream);
      gpu::mutual_information_backward<T>(xt, yt, bptr, ptr<mi_acc_t>(p), nullptr, mutable_ptr<T>(occ_x),
                                          mutable_ptr<T>(occ_y), m.B, m.S, m.T, m.modified, stream);
      gpu::joint_mutual_information_rows<T>(ptr<T>(px), ptr<T>(py), ptr<T>(occ_x), ptr<T>(occ_y), ptr<T>(ans),
                                            mutable_ptr<T>(out), j.N, m.B, cx, cy, stream);
#else
      throw_no_cuda(op);
#endif
    }
  });
  return {out, occ_x, occ_y};
}

std::vector<paddle::Tensor> JointMutualInformationGradKernel(const paddle::Tensor& px_in, const paddle::Tensor& py_in,
                                                             const paddle::Tensor& occ_x_in,
                                                             const paddle::Tensor& occ_y_in,
                                                             const paddle::Tensor& out_grad_in) {
  const char* op = "joint_mutual_information_grad";
  const paddle::Tensor occ_x = dense(occ_x_in), occ_y = dense(occ_y_in), out_grad = dense(out_grad_in);
  const JointShape j = joint_shape(px_in.shape(), py_in.shape(), op);
  PE_CHECK(occ_x.shape() == j.x && occ_y.shape() == j.y && out_grad.numel() == j.N * (j.x.empty() ? 0 : j.x[0]), op,
           ": the occupations and out_grad must match px and py");
  const int64_t B = j.x[0], cx = numel_of(j.x) / std::max<int64_t>(1, B), cy = numel_of(j.y) / std::max<int64_t>(1, B);
  paddle::Tensor px_grad = new_output(px_in.shape(), px_in.dtype(), occ_x.place());
  paddle::Tensor py_grad = new_output(py_in.shape(), py_in.dtype(), occ_x.place());
  dispatch_float_double(occ_x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (occ_x.is_cpu()) {
      cpu::joint_mutual_information_grad<T>(ptr<T>(occ_x), ptr<T>(out_grad), mutable_ptr<T>(px_grad), j.N, B, cx);
      cpu::joint_mutual_information_grad<T>(ptr<T>(occ_y), ptr<T>(out_grad), mutable_ptr<T>(py_grad), j.N, B, cy);
    } else {
#ifdef PADDLE_EXT_WITH_CUDA
      gpu::joint_mutual_information_grad<T>(ptr<T>(occ_x), ptr<T>(out_grad), mutable_ptr<T>(px_grad), j.N, B, cx,
                                            occ_x.stream());
      gpu::joint_mutual_information_grad<T>(ptr<T>(occ_y), ptr<T>(out_grad), mutable_ptr<T>(py_grad), j.N, B, cy,
                                            occ_x.stream());
#else
      throw_no_cuda(op);
#endif
    }
  });
  return {px_grad, py_grad};
}

}  // namespace paddle_ext
