// Complex numbers for the Paddle-free kernels (names prefixed complex_: an unqualified exp/log in namespace
// paddle_ext must still find the real ones), written once for CPU and CUDA: a POD storage type with
// the layout of phi::dtype::complex<float/double> (real, then imaginary; aligned to its size), which the
// binding reinterprets Paddle's pointers as, and the few functions the complex scans need.
#pragma once

#include "paddle_ext/common.h"

namespace paddle_ext {

template <typename R>
struct alignas(sizeof(R) * 2) complex {
  R real;
  R imag;
};
static_assert(sizeof(complex<float>) == 8 && sizeof(complex<double>) == 16, "two packed reals");

// complex64 computes in complex<double> too: exp/log in double cost about what float's do on the CPU,
// and a float difference of two large imaginary parts would lose the phase (|imag| ~ 1e4: 1e-3 rad).
template <typename R>
PE_HOSTDEVICE inline complex<double> widen(complex<R> z) {
  return {static_cast<double>(z.real), static_cast<double>(z.imag)};
}
template <typename T>
PE_HOSTDEVICE inline T narrow(complex<double> z) {
  using R = decltype(T::real);
  return {static_cast<R>(z.real), static_cast<R>(z.imag)};
}

template <typename R>
PE_HOSTDEVICE inline complex<R> operator+(complex<R> a, complex<R> b) {
  return {a.real + b.real, a.imag + b.imag};
}
template <typename R>
PE_HOSTDEVICE inline complex<R> operator-(complex<R> a, complex<R> b) {
  return {a.real - b.real, a.imag - b.imag};
}
template <typename R>
PE_HOSTDEVICE inline complex<R> conj(complex<R> z) {
  return {z.real, -z.imag};
}
template <typename R>
PE_HOSTDEVICE inline bool has_nan(complex<R> z) {
  return z.real != z.real || z.imag != z.imag;
}
template <typename R>
PE_HOSTDEVICE inline complex<R> complex_nan() {
  const R nan = std::numeric_limits<R>::quiet_NaN();
  return {nan, nan};
}

// exp(z); a real z stays real (exp(+inf) * sin(0) would be NaN).
template <typename R>
PE_HOSTDEVICE inline complex<R> complex_exp(complex<R> z) {
  const R magnitude = std::exp(z.real);
  if (z.imag == R(0)) return {magnitude, z.imag};
  return {magnitude * std::cos(z.imag), magnitude * std::sin(z.imag)};
}

// The principal log: log|z| + i arg(z), arg in (-pi, pi]; log(0) = -inf + i arg.
template <typename R>
PE_HOSTDEVICE inline complex<R> complex_log(complex<R> z) {
  return {std::log(std::hypot(z.real, z.imag)), std::atan2(z.imag, z.real)};
}

// log(1 + z), accurate for small |z| (where 1 + z would round z away): log|1+z| = log1p(x(2+x) + y^2)/2.
// For x < -1/2, 1 + x is exact, and hypot(1 + x, y) is the accurate form (near 1 + z = 0 as well).
template <typename R>
PE_HOSTDEVICE inline complex<R> complex_log1p(complex<R> z) {
  const R x = z.real, y = z.imag;
  const R magnitude_log = (x < R(-0.5) || std::fabs(x) > R(1) || std::fabs(y) > R(1))
                              ? std::log(std::hypot(R(1) + x, y))
                              : R(0.5) * std::log1p(x * (R(2) + x) + y * y);
  return {magnitude_log, std::atan2(y, R(1) + x)};
}

// The empty sum's log: the identity of complex_log_add_exp.
template <typename R>
PE_HOSTDEVICE inline complex<R> complex_log_zero() {
  return {neg_inf<R>(), R(0)};
}

// log(exp(a) + exp(b)), a the earlier term in scan order: the term with the larger real part is the pivot,
// p + log1p(exp(q - p)), so no exp overflows. NaN (in either part) gives NaN + NaN i; a term with real part
// -inf adds nothing; +inf: the first +inf term wins (its imaginary part), as the real scan stays at +inf.
// The imaginary part is the pivot's plus arg(1 + exp(q - p)): not wrapped, as torch's.
template <typename R>
PE_HOSTDEVICE inline complex<R> complex_log_add_exp(complex<R> a, complex<R> b) {
  if (has_nan(a) || has_nan(b)) return complex_nan<R>();
  if (b.real == neg_inf<R>()) return a;
  if (a.real == neg_inf<R>()) return b;
  if (a.real == -neg_inf<R>()) return a;
  if (b.real == -neg_inf<R>()) return b;
  const bool a_pivot = a.real >= b.real;
  const complex<R> pivot = a_pivot ? a : b, other = a_pivot ? b : a;
  return pivot + complex_log1p(complex_exp(other - pivot));
}

}  // namespace paddle_ext
