"""paddle_ext: fast, exact custom operators for PaddlePaddle."""

from ._library import library_path
from .logcumsumexp import logcumsumexp
from .adaptive_log_softmax import adaptive_log_softmax_full, adaptive_log_softmax_target
from . import nn

__version__ = "0.1.0"

__all__ = ["logcumsumexp", "library_path", "adaptive_log_softmax_target", "adaptive_log_softmax_full", "nn"]
