"""RNN-T losses on top of ``mutual_information_recursion``: k2 / fast_rnnt's rnnt_loss_simple,
rnnt_loss_smoothed, rnnt_loss, the pruning helpers and rnnt_loss_pruned, in Paddle ops.

Each loss reduces the transducer lattice to the compact form ``px [B, S, T+1]`` (symbol
emissions; ``[B, S, T]`` for rnnt_type 'modified'/'constrained') and ``py [B, S+1, T]``
(termination/blank emissions), then runs the recursion; the loss is ``-ans``.
Everything here works unchanged in dygraph and static mode, with dimensions that are dynamic in a
static graph (``None`` in an InputSpec, -1 in ``x.shape``) too: the graph takes those sizes from the
tensors when it runs (``_dims``), and shape checks compare the dimensions known when it is built (the
kernels check the rest). Checks that need the values of ``boundary`` (and the s_range adjustment of
``get_rnnt_prune_ranges``) run in dygraph only.

Each public function only sends its arguments through ``_amp.float32_op`` (float16/bfloat16 inputs and
any call under auto_cast computed in float32; docs/rnnt_loss.md, "Mixed precision") to its ``_name``
twin, which does the work. The twins and the checks take ``op``, the name of the public function the user
called: every error names it (a loss calls the twins of the get_rnnt_logprobs* it is built on with its own name).

One file per loss (``simple``, ``full``, ``pruned``, ``smoothed``, ``fused_joiner``: the joiner fused into the
full or pruned loss); ``common`` holds the checks and what every
loss does with its (px, py).
"""

from .common import boundary_from_lengths
from .full import get_rnnt_logprobs_joint, rnnt_loss
from .fused_joiner import rnnt_loss_fused_joiner
from .pruned import do_rnnt_pruning, get_rnnt_logprobs_pruned, get_rnnt_prune_ranges, rnnt_loss_pruned
from .simple import get_rnnt_logprobs, rnnt_loss_simple
from .smoothed import get_rnnt_logprobs_smoothed, rnnt_loss_smoothed

__all__ = [
    "boundary_from_lengths",
    "do_rnnt_pruning",
    "get_rnnt_logprobs",
    "get_rnnt_logprobs_joint",
    "get_rnnt_logprobs_pruned",
    "get_rnnt_logprobs_smoothed",
    "get_rnnt_prune_ranges",
    "rnnt_loss",
    "rnnt_loss_fused_joiner",
    "rnnt_loss_pruned",
    "rnnt_loss_simple",
    "rnnt_loss_smoothed",
]
