"""paddle_ext.mutual_information_recursion: the k2 / fast_rnnt lattice recursion behind RNN-T losses."""

from __future__ import annotations

import numpy as np
import paddle

from . import _amp, _library
from ._checks import check_tensor, dtype_name, index64, is_floating, is_plain_dtype, known_dim, same_dtype


@paddle.jit.not_to_static
def check_boundary(boundary, B, S, T, op, arg="boundary"):
    """Type/shape checks always; value checks where the values are known (dygraph). ``op``: the public
    function the user called, which every error names."""
    if boundary is None:
        return None
    check_tensor(boundary, arg, op)
    if not same_dtype(boundary.dtype, paddle.int64):  # (int32 was cast where the public function starts)
        raise TypeError(f"{op}: {arg} must be int32 or int64, got {dtype_name(boundary.dtype)}")
    shape = list(boundary.shape)
    if len(shape) != 2 or shape[1] != 4 or (known_dim(shape[0], B) and shape[0] != B):
        raise ValueError(f"{op}: {arg} must have shape [B, 4] = [{B}, 4], got {shape}")
    if paddle.in_dynamic_mode():
        rows = boundary.numpy()
        s_begin, t_begin, s_end, t_end = rows.T
        bad_s = ~((0 <= s_begin) & (s_begin <= s_end) & (s_end <= S))
        bad_t = ~((0 <= t_begin) & (t_begin <= t_end) & (t_end <= T))
        if bad_s.any() or bad_t.any():  # the first bad row, its s rule before its t rule
            b = int(np.flatnonzero(bad_s | bad_t)[0])
            rule = f"0 <= s_begin <= s_end <= S (S = {S})" if bad_s[b] else f"0 <= t_begin <= t_end <= T (T = {T})"
            raise ValueError(f"{op}: {arg} row {b} = {rows[b].tolist()} breaks {rule}")
    return boundary


@paddle.jit.not_to_static
def check_px_py(px, py, op):
    """Returns (B, S, T, modified) after checking shapes and dtypes; modified is None where px's and
    py's last dims are not known (a dynamic T in a static graph)."""
    check_tensor(px, "px", op)
    check_tensor(py, "py", op)
    px_shape, py_shape = px.shape, py.shape  # (each read costs a fraction of a microsecond)
    if len(px_shape) != 3 or len(py_shape) != 3:
        raise ValueError(f"{op}: px and py must be 3-D ([B, S, T+1] or [B, S, T], and [B, S+1, T]); "
                         f"got px {list(px_shape)}, py {list(py_shape)}")
    dtype = px.dtype
    if not is_floating(dtype):
        raise TypeError(f"{op}: px must be a floating tensor, got {dtype_name(dtype)}")
    if not same_dtype(py.dtype, dtype):
        raise TypeError(f"{op}: py must have px's dtype {dtype_name(dtype)}, got {dtype_name(py.dtype)}")
    B, S, T1 = px_shape
    By, S1, T = py_shape
    if known_dim(B, By) and B != By:
        raise ValueError(f"{op}: px and py must have the same batch size, got {B} and {By}")
    if known_dim(S, S1) and S1 != S + 1:
        raise ValueError(f"{op}: py must have shape [B, S+1, T] for px of shape {list(px_shape)}, got {list(py_shape)}")
    if not known_dim(T1, T):  # a dynamic T (static graph): the kernel checks at run time
        return B, S, T, None
    if T1 != T and T1 != T + 1:
        raise ValueError(f"{op}: px's last dim must be T+1 = {T + 1} (regular) or T = {T} (modified), got {T1}")
    return B, S, T, T1 == T


@_library.unified
def mutual_information_recursion(px, py, boundary=None, return_grad=False, *, name=None):
    """The log-add recursion of k2's ``mutual_information_recursion``.

    ``p[b, s_begin, t_begin] = 0``; regular (px ``[B, S, T+1]``):
    ``p[s,t] = log_add(p[s-1,t] + px[s-1,t], p[s,t-1] + py[s,t-1])``; modified (px ``[B, S, T]``):
    ``p[s,t] = log_add(p[s-1,t-1] + px[s-1,t-1], p[s,t-1] + py[s,t-1])``; terms from outside the box
    are -inf.

    Args:
        px (Tensor): ``[B, S, T+1]`` or ``[B, S, T]``, float16/bfloat16/float32/float64 (16-bit types
            are computed in float32).
        py (Tensor): ``[B, S+1, T]``, px's dtype.
        boundary (Tensor|None): int64 (or int32) ``[B, 4]`` rows ``(s_begin, t_begin, s_end, t_end)`` with
            ``0 <= s_begin <= s_end <= S`` and ``0 <= t_begin <= t_end <= T``; default ``(0, 0, S, T)``.
        return_grad (bool): also return ``(px_grad, py_grad)``, the grads of ``ans.sum()`` (occupation
            probabilities), as non-differentiable tensors.
        name: unused, for API compatibility.

    Returns:
        ``ans`` of shape ``[B]`` = ``p[b, s_end, t_end]``, or ``(ans, (px_grad, py_grad))``, in px's dtype;
        float32 under ``paddle.amp.auto_cast``, which is off inside (docs/mutual_information.md).

    First-order grads only: a backward through grads taken with ``paddle.grad(..., create_graph=True)``
    raises NotImplementedError (the registered grad op's double-grad op refuses; docs/mutual_information.md).
    """
    boundary = index64(boundary)
    if not return_grad and _amp.fast_lane((px, py), (boundary,)):
        return _amp.first_try(_recursion_in_kernel_checks, _checked_recursion, px, py, boundary)
    return _checked_recursion(px, py, boundary, return_grad)


def _checked_recursion(px, py, boundary, return_grad=False):
    # 16-bit inputs and auto_cast: float32 inside
    return _amp.float32_op(_recursion, 2, px, py, boundary, return_grad, "mutual_information_recursion")


def _recursion_in_kernel_checks(px, py, boundary):
    """The recursion on CPU float32/float64 tensors, every check (shapes, dtypes, boundary values) left to the kernel."""
    return _library.call_op("pe_mutual_information", (px, py), px, py, boundary)[0]


def _recursion(px, py, boundary, return_grad, op, boundary_checked=False):
    """mutual_information_recursion for ``op``, the public function the user called (named in every error);
    boundary_checked: a loss's own checks have checked boundary against these B, S, T."""
    B, S, T, _modified = check_px_py(px, py, op)
    if not boundary_checked:
        check_boundary(boundary, B, S, T, op)
    dtype = px.dtype
    half = not is_plain_dtype(dtype) and dtype in _amp.HALF_DTYPES
    if half:
        px, py = px.astype("float32"), py.astype("float32")
    ans, p = _library.call_op("pe_mutual_information", (px, py), px, py, boundary)
    if half:
        ans = ans.astype(dtype)
    if not return_grad:
        return ans
    px_grad, py_grad = _library.ops().pe_mutual_information_occupation(px.detach(), py.detach(), boundary, p.detach())
    if half:
        px_grad, py_grad = px_grad.astype(dtype), py_grad.astype(dtype)
    px_grad.stop_gradient = True
    py_grad.stop_gradient = True
    return ans, (px_grad, py_grad)


def joint_mutual_information_recursion(px, py, boundary=None):
    """k2's ``joint_mutual_information_recursion``: the recursion on ``sum(px)``, ``sum(py)``, reported per term.

    Args:
        px (list[Tensor]): N >= 1 tensors of one shape, ``[B, S, T+1]`` or ``[B, S, T]``, one floating dtype.
        py (list[Tensor]): N tensors ``[B, S+1, T]``, px's dtype.
        boundary (Tensor|None): as in :func:`mutual_information_recursion`.

    Returns:
        ``[N, B]``: row i is ``<occ_x, px[i]> + <occ_y, py[i]>`` with ``(occ_x, occ_y)`` the occupation
        probabilities of the summed lattice (constants: the grad of row i w.r.t. px[i] is occ_x, and 0
        w.r.t. px[j], j != i); row 0 also holds ``ans - sum of the rows`` (no grad), so the rows sum to
        the recursion's ``ans`` on the sums. Cells with zero occupation count 0 (even where px[i] is -inf).

    First-order grads only: a backward through grads taken with ``paddle.grad(..., create_graph=True)``
    raises NotImplementedError (as for :func:`mutual_information_recursion`).
    """
    boundary = index64(boundary)
    if (px.__class__ is list and py.__class__ is list and px and len(px) == len(py)
            and _amp.fast_lane((*px, *py), (boundary,)) and _one_dtype(px, py)):
        return _amp.first_try(_joint_in_kernel_checks, _checked_joint, px, py, boundary)
    return _checked_joint(px, py, boundary)


def _one_dtype(px, py):
    dtype = px[0].dtype
    return all(x.dtype is dtype for x in px) and all(y.dtype is dtype for y in py)


def _checked_joint(px, py, boundary):
    n = _check_sequences(px, py)
    return _amp.float32_op(lambda *xy: _joint(xy[:n], xy[n:], boundary), 2 * n, *px, *py)


def _joint_in_kernel_checks(px, py, boundary):
    """The fused op on CPU float32/float64 terms of one dtype: shapes, dtypes and boundary rows left to
    paddle.stack and the kernel."""
    stacked = paddle.stack(px), paddle.stack(py)
    return _library.call_op("pe_joint_mutual_information", stacked, *stacked, boundary)[0]


@paddle.jit.not_to_static
def _check_sequences(px, py):
    op = "joint_mutual_information_recursion"
    for arg, v in (("px", px), ("py", py)):
        if not isinstance(v, (list, tuple)) or not v:
            raise TypeError(f"{op}: {arg} must be a non-empty list of tensors, got {type(v).__name__}"
                            + (" of length 0" if isinstance(v, (list, tuple)) else ""))
    if len(px) != len(py):
        raise ValueError(f"{op}: px and py must have the same length, got {len(px)} and {len(py)}")
    for i, (x, y) in enumerate(zip(px, py)):
        check_tensor(x, f"px[{i}]", op)
        check_tensor(y, f"py[{i}]", op)
        for arg, v, first in ((f"px[{i}]", x, px[0]), (f"py[{i}]", y, py[0])):
            if list(v.shape) != list(first.shape) or v.dtype != first.dtype:
                raise ValueError(f"{op}: {arg} must have the shape and dtype of {arg[:2]}[0], "
                                 f"{list(first.shape)} {dtype_name(first.dtype)}; got {list(v.shape)} "
                                 f"{dtype_name(v.dtype)}")
    return len(px)


def _joint(px, py, boundary):
    """The fused op on the stacked terms (its grad op holds the occupations constant, as k2 does)."""
    op = "joint_mutual_information_recursion"
    B, S, T, _modified = check_px_py(px[0], py[0], op)
    check_boundary(boundary, B, S, T, op)
    stacked = paddle.stack(list(px)), paddle.stack(list(py))
    return _library.call_op("pe_joint_mutual_information", stacked, *stacked, boundary)[0]


__all__ = ["joint_mutual_information_recursion", "mutual_information_recursion"]
