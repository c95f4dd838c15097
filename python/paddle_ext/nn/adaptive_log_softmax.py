"""paddle_ext.nn.AdaptiveLogSoftmaxWithLoss: Paddle 3.3.1's layer (signature and parameter layout), on the
fused ops of paddle_ext.adaptive_log_softmax (PyTorch's algorithm, none of Paddle's O(K^2) log_softmax)."""

from __future__ import annotations

import paddle

from .. import adaptive_log_softmax as _als
from ..adaptive_log_softmax.checks import _check_input_label, _check_label_range, _mask_ignored


class _TailPair(paddle.nn.Layer):
    """[W1, W2] of one tail cluster, registered as parameters "0" and "1" (paddle.nn.ParameterList
    would do, but it rejects the parameters of a static program)."""

    def __init__(self, w1, w2):
        super().__init__()
        self.add_parameter("0", w1)
        self.add_parameter("1", w2)

    def __getitem__(self, i):
        return self._parameters[str(range(2)[i])]

    def __len__(self):
        return 2

    def __iter__(self):
        return iter((self[0], self[1]))


class AdaptiveLogSoftmaxWithLoss(paddle.nn.Layer):
    """Adaptive softmax (Grave et al., "Efficient softmax approximation for GPUs").

    Classes, sorted by decreasing frequency, are split by ``cutoffs``: ``[0, cutoffs[0])`` is the
    shortlist, scored by the head together with one column per tail cluster; tail cluster i holds
    ``[cutoffs[i], cutoffs[i+1])`` (the last one ends at ``n_classes``) and is scored through a
    projection to ``in_features // div_value**(i+1)`` features.

    Args:
        in_features (int): features of the input.
        n_classes (int): number of classes.
        cutoffs (Sequence[int]): strictly increasing ints in ``[1, n_classes - 1]``.
        weight_attr, bias_attr (ParamAttr|None): attributes of the weights / of the head bias.
        div_value (float): the projection shrink factor per cluster (default 4.0).
        head_bias (bool): add a bias to the head (default False).
        ignore_index (int, keyword-only): rows whose label equals it count for nothing: output 0, no
            loss, no grad, no tail cluster work (default -100, as nll_loss).
        reduction (str, keyword-only): 'mean' (over the rows that count; 0 when every row is ignored,
            as nll_loss), 'sum' or 'none' (a per-row loss, 0 on ignored rows). Default 'mean'.

    Parameters (Paddle's layout, all in ``parameters()`` and ``state_dict``):
        ``head_weight`` [in_features, cutoffs[0] + n_clusters], ``head_bias`` [cutoffs[0] + n_clusters]
        or None, ``tail_weights[i] = [W1 [in_features, hsz_i], W2 [hsz_i, cluster size]]``
        (state_dict keys ``tail_weights.<i>.0`` and ``tail_weights.<i>.1``).
    """

    def __init__(self, in_features, n_classes, cutoffs, weight_attr=None, bias_attr=None, div_value=4.0,
                 head_bias=False, name=None, *, ignore_index=-100, reduction="mean"):
        super().__init__()
        where = "AdaptiveLogSoftmaxWithLoss"
        self.ignore_index = _als.check_loss_args(ignore_index, reduction, where)
        self.reduction = reduction
        in_features, n_classes, cutoffs = _als.check_layer_sizes(in_features, "in_features", n_classes, cutoffs,
                                                                 div_value, where)
        self._dtype = self._helper.get_default_dtype()
        self.in_features = in_features
        self.n_classes = n_classes
        self.cutoffs = [*cutoffs, n_classes]
        self.div_value = div_value
        self._weight_attr = weight_attr
        self._bias_attr = bias_attr
        self.is_head_bias = head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters

        self.head_weight = self.create_parameter(shape=[in_features, self.head_size], attr=weight_attr,
                                                 dtype=self._dtype, is_bias=False)
        if head_bias:
            self.head_bias = self.create_parameter(shape=[self.head_size], attr=bias_attr, dtype=self._dtype,
                                                   is_bias=True)
        else:
            self.head_bias = None
        tails = []
        for i in range(self.n_clusters):
            hsz = int(in_features // (div_value ** (i + 1)))
            osz = self.cutoffs[i + 1] - self.cutoffs[i]
            tails.append(_TailPair(
                self.create_parameter(shape=[in_features, hsz], attr=weight_attr, dtype=self._dtype, is_bias=False),
                self.create_parameter(shape=[hsz, osz], attr=weight_attr, dtype=self._dtype, is_bias=False),
            ))
        # Unlike Paddle 3.3.1's plain list, registered: the tail weights train, save and load.
        self.tail_weights = paddle.nn.LayerList(tails)

    def _check(self, input, label=None):
        where = f"{type(self).__name__}"
        return _check_input_label(input, label, self.in_features, where)

    def forward(self, input, label):
        """(output, loss): output [N] the log-probability of each label (0 on ignored rows), loss the
        reduced negative log-likelihood (``reduction``)."""
        label = self._check(input, label)
        label, keep = _mask_ignored(label, self.ignore_index)
        label = _check_label_range(label, self.n_classes, type(self).__name__)
        return _als.adaptive_log_softmax_with_loss_checked(input, label, self.head_weight, self.tail_weights,
                                                           self.cutoffs, self.head_bias, keep=keep,
                                                           reduction=self.reduction)

    def log_prob(self, input):
        """[N, n_classes] log-probabilities of every class (rows sum to 1 in probability), input's dtype."""
        self._check(input)
        return _als.adaptive_log_prob(input, self.head_weight, self.tail_weights, self.cutoffs, self.head_bias)

    def predict(self, input):
        """[N] int64: the most likely class of each row (== argmax of log_prob)."""
        self._check(input)
        return _als.adaptive_predict(input, self.head_weight, self.tail_weights, self.cutoffs, self.head_bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, n_classes={self.n_classes}, cutoffs={self.cutoffs[:-1]}, "
                f"div_value={self.div_value}, head_bias={self.is_head_bias}, ignore_index={self.ignore_index}, "
                f"reduction={self.reduction!r}")
