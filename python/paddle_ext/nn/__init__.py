"""paddle_ext.nn: layers (and nn.functional) built on paddle_ext's ops."""

from . import functional
from .adaptive_embedding import AdaptiveEmbedding
from .adaptive_log_softmax import AdaptiveLogSoftmaxWithLoss
from .transducer_joiner import TransducerJoiner

__all__ = ["AdaptiveEmbedding", "AdaptiveLogSoftmaxWithLoss", "TransducerJoiner", "functional"]
