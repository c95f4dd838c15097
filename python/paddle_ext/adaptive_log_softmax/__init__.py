"""paddle_ext.adaptive_log_softmax: the fused per-cluster ops and the adaptive softmax built on them.

The public layer is ``paddle_ext.nn.AdaptiveLogSoftmaxWithLoss`` and the functional form
``paddle_ext.nn.functional.adaptive_log_softmax_with_loss``; both run on the two fused ops of ``ops``
(``adaptive_log_softmax_target``, ``adaptive_log_softmax_full``). The projections (``projection``) of
float32 CPU tensors outside auto_cast run on ``pe_adaptive_matmul``, oneDNN's sgemm (Paddle's bundled MKL
takes a slow generic path on AMD CPUs); every other matmul stays on Paddle's. Paddle's own CPU
``log_softmax`` is O(K^2) per row on wide rows (docs/architecture.md, "Paddle's custom-op API"), so nothing
here uses it. ``clusters`` puts them together: the loss, ``log_prob`` and ``predict``; ``checks`` holds the
argument checks.
"""

from .checks import REDUCTIONS, check_cutoffs, check_layer_sizes, check_loss_args
from .clusters import (adaptive_log_prob, adaptive_log_softmax_with_loss, adaptive_log_softmax_with_loss_checked,
                       adaptive_predict)
from .ops import LabelOutOfRangeError, adaptive_log_softmax_full, adaptive_log_softmax_target

__all__ = [
    "LabelOutOfRangeError",
    "REDUCTIONS",
    "adaptive_log_prob",
    "adaptive_log_softmax_full",
    "adaptive_log_softmax_target",
    "adaptive_log_softmax_with_loss",
    "adaptive_log_softmax_with_loss_checked",
    "adaptive_predict",
    "check_cutoffs",
    "check_layer_sizes",
    "check_loss_args",
]
