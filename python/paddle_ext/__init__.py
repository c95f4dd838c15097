"""paddle_ext: fast, exact custom operators for PaddlePaddle.

Importing it loads the op library and registers every op with Paddle, so a process that only does
``import paddle_ext`` can ``paddle.jit.load`` or serve (``paddle.inference``) a model that uses them.
"""

from . import _library

_library.load()  # register every op now, before any model is loaded; a clear ImportError otherwise

from . import nn  # noqa: E402
from ._library import library_path  # noqa: E402
from .adaptive_log_softmax import adaptive_log_softmax_full, adaptive_log_softmax_target
from .logcumsumexp import logcumsumexp
from .mutual_information import joint_mutual_information_recursion, mutual_information_recursion
from .put_along_axis import put_along_axis, put_along_axis_
from .rnnt_loss import (boundary_from_lengths, do_rnnt_pruning, get_rnnt_logprobs, get_rnnt_logprobs_joint,
                        get_rnnt_logprobs_pruned, get_rnnt_logprobs_smoothed, get_rnnt_prune_ranges, rnnt_loss,
                        rnnt_loss_fused_joiner, rnnt_loss_pruned, rnnt_loss_simple, rnnt_loss_smoothed)
from .transducer_jump_loss import multiblank_rnnt_loss, multiblank_rnnt_loss_fused_joiner, tdt_loss, tdt_loss_fused_joiner

__version__ = "0.1.0"

__all__ = ["logcumsumexp", "put_along_axis", "put_along_axis_", "mutual_information_recursion",
           "joint_mutual_information_recursion",
           "rnnt_loss_simple", "rnnt_loss_smoothed", "rnnt_loss", "rnnt_loss_pruned", "rnnt_loss_fused_joiner",
           "get_rnnt_prune_ranges",
           "do_rnnt_pruning", "get_rnnt_logprobs", "get_rnnt_logprobs_joint", "get_rnnt_logprobs_pruned",
           "get_rnnt_logprobs_smoothed", "boundary_from_lengths", "tdt_loss", "multiblank_rnnt_loss", "tdt_loss_fused_joiner",
           "multiblank_rnnt_loss_fused_joiner", "adaptive_log_softmax_target",
           "adaptive_log_softmax_full", "nn", "library_path"]
