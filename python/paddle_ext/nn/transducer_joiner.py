"""paddle_ext.nn.TransducerJoiner: icefall's transducer joiner (two input projections, an activation, the output
Linear) whose losses run with the joiner fused in (paddle_ext.rnnt_loss_fused_joiner and the TDT / multi-blank
forms): training never forms the [B, T, S+1, C] logits; ``forward`` gives logits for decoding."""

from __future__ import annotations

import paddle
import paddle.nn.functional as F

from .. import _library
from .. import rnnt_loss as _rnnt
from .. import transducer_jump_loss as _jump
from ..rnnt_loss.fused_joiner import ACTIVATIONS


class TransducerJoiner(paddle.nn.Layer):
    """``output_linear(act(encoder_proj(encoder_out) + decoder_proj(decoder_out)))``.

    Args:
        encoder_dim (int), decoder_dim (int): features of the encoder and predictor outputs.
        joiner_dim (int): J, the features of the projections and the activation.
        num_outputs (int): C, the logits (for TDT: C token units + D duration units).
        activation (str): 'tanh' (icefall's), 'relu' or 'identity'.

    Sublayers ``encoder_proj``, ``decoder_proj`` and ``output_linear`` are ``paddle.nn.Linear``.
    """

    def __init__(self, encoder_dim, decoder_dim, joiner_dim, num_outputs, activation="tanh"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"TransducerJoiner: activation must be one of {ACTIVATIONS}, got {activation!r}")
        self.activation = activation
        self.encoder_proj = paddle.nn.Linear(encoder_dim, joiner_dim)
        self.decoder_proj = paddle.nn.Linear(decoder_dim, joiner_dim)
        self.output_linear = paddle.nn.Linear(joiner_dim, num_outputs)

    def forward(self, encoder_out, decoder_out):
        """Logits for decoding: encoder_out ``[..., encoder_dim]`` and decoder_out ``[..., decoder_dim]`` whose
        leading dims broadcast (e.g. ``[N, 1, 1, E]`` and ``[N, 1, 1, D]``, or ``[B, T, 1, E]`` and
        ``[B, 1, S+1, D]``)."""
        x = self.encoder_proj(encoder_out) + self.decoder_proj(decoder_out)
        if self.activation == "tanh":
            x = paddle.tanh(x)
        elif self.activation == "relu":
            x = F.relu(x)
        return self.output_linear(x)

    def _projected(self, encoder_out, decoder_out):
        return (self.encoder_proj(encoder_out), self.decoder_proj(decoder_out), self.output_linear.weight,
                self.output_linear.bias)

    @_library.unified
    def rnnt_loss(self, encoder_out, decoder_out, symbols, termination_symbol, boundary=None, rnnt_type="regular",
                  delay_penalty=0.0, reduction="mean", *, ranges=None, fastemit_lambda=0.0, clamp=-1.0, name=None):
        """:func:`paddle_ext.rnnt_loss_fused_joiner` of encoder_out ``[B, T, E]`` and decoder_out ``[B, S+1, D]``
        (pruned through ``ranges`` ``[B, T, s_range]``)."""
        return _rnnt.rnnt_loss_fused_joiner(*self._projected(encoder_out, decoder_out), symbols, termination_symbol,
                                            boundary, rnnt_type, delay_penalty, reduction, ranges=ranges,
                                            activation=self.activation, fastemit_lambda=fastemit_lambda, clamp=clamp)

    @_library.unified
    def tdt_loss(self, encoder_out, decoder_out, symbols, durations, termination_symbol, boundary=None,
                 reduction="mean", *, sigma=0.0, fastemit_lambda=0.0, clamp=-1.0, name=None):
        """:func:`paddle_ext.tdt_loss_fused_joiner` (num_outputs = C + len(durations))."""
        return _jump.tdt_loss_fused_joiner(*self._projected(encoder_out, decoder_out), symbols, durations,
                                           termination_symbol, boundary, reduction, activation=self.activation,
                                           sigma=sigma, fastemit_lambda=fastemit_lambda, clamp=clamp)

    @_library.unified
    def multiblank_rnnt_loss(self, encoder_out, decoder_out, symbols, big_blank_durations, termination_symbol,
                             boundary=None, reduction="mean", *, sigma=0.0, fastemit_lambda=0.0, clamp=-1.0,
                             name=None):
        """:func:`paddle_ext.multiblank_rnnt_loss_fused_joiner`."""
        return _jump.multiblank_rnnt_loss_fused_joiner(*self._projected(encoder_out, decoder_out), symbols,
                                                       big_blank_durations, termination_symbol, boundary, reduction,
                                                       activation=self.activation, sigma=sigma,
                                                       fastemit_lambda=fastemit_lambda, clamp=clamp)
