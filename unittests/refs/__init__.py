"""NumPy float64 references for every op: one small, clear function per op.

They favour obviousness over speed and are the specification the tests hold the kernels to. One module
per op family; the tests use them as `refs.<name>`, so every reference is re-exported here.
"""

from .logcumsumexp import (complex_log_add_exp, logcumsumexp, logcumsumexp_complex, logcumsumexp_complex_grad,
                           logcumsumexp_grad, logcumsumexp_grad_dense, logcumsumexp_grad_scan)
from .put_along_axis import put_along_axis, put_along_axis_grad
from .mutual_information import (joint_mutual_information, mutual_information, mutual_information_brute_force,
                                 mutual_information_grad, mutual_information_grad_wavefront,
                                 mutual_information_wavefront, rnnt_delay_penalised, rnnt_logprobs,
                                 rnnt_logprobs_smoothed, rnnt_loss, rnnt_loss_from_logprobs, rnnt_loss_logprob_grads,
                                 rnnt_loss_pruned, rnnt_loss_smoothed, rnnt_simple_logprobs, rnnt_simple_logprobs_grad)
from .adaptive_log_softmax import (adaptive_embedding, adaptive_log_prob, adaptive_log_softmax_full,
                                   adaptive_log_softmax_full_grad, adaptive_log_softmax_target,
                                   adaptive_log_softmax_target_grad, adaptive_log_softmax_with_loss, log_softmax_lse,
                                   logsumexp_rows)
from .rnnt_joint_logprobs import (rnnt_joint_logprobs, rnnt_joint_logprobs_grad, rnnt_loss_grad, rnnt_prune_gather,
                                  rnnt_prune_gather_grad)
from .transducer_jump_loss import (jump_lattice_alpha_beta, jump_lattice_loss, jump_lattice_loss_brute_force,
                                   jump_lattice_loss_grad, multiblank_arcs, multiblank_loss, multiblank_loss_grad,
                                   tdt_arcs, tdt_loss, tdt_loss_grad, tdt_loss_nemo)
