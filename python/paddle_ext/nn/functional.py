"""paddle_ext.nn.functional: functional forms of paddle_ext's layers."""

from ..adaptive_log_softmax import adaptive_log_softmax_with_loss

__all__ = ["adaptive_log_softmax_with_loss"]
