"""paddle_ext.nn.AdaptiveEmbedding: adaptive input (Baevski & Auli, "Adaptive input representations for
neural language modeling", 2019), the embedding side of AdaptiveLogSoftmaxWithLoss, optionally sharing
its weights (same cutoffs, same parameter layout)."""

from __future__ import annotations

import paddle
from paddle.autograd import PyLayer

from .. import _fill
from .. import adaptive_log_softmax as _als
from ..adaptive_log_softmax.checks import _check_label_range
from ..adaptive_log_softmax.clusters import _grads_must_sync, _index_add, _with_zero_row, _ZeroGrads
from ..adaptive_log_softmax.ops import _as_int64
from ..adaptive_log_softmax.projection import _cast, _gemm
from .adaptive_log_softmax import AdaptiveLogSoftmaxWithLoss, _TailPair

_WHERE = "AdaptiveEmbedding"


class AdaptiveEmbedding(paddle.nn.Layer):
    """Embeddings whose width shrinks with the class frequency, projected to ``embedding_dim``.

    Classes, sorted by decreasing frequency, are split by ``cutoffs`` as in AdaptiveLogSoftmaxWithLoss:
    the shortlist ``[0, cutoffs[0])`` embeds in ``embedding_dim`` features (no projection: a square
    projection of a free table adds nothing); tail cluster i (classes ``[cutoffs[i], cutoffs[i+1])``,
    the last ending at ``n_classes``) embeds in ``hsz_i = embedding_dim // div_value**(i+1)`` features
    and is projected back to ``embedding_dim``.

    The parameters have AdaptiveLogSoftmaxWithLoss's layout (a class is a column):
    ``head_weight [embedding_dim, cutoffs[0]]`` (``embedding(y) = head_weight[:, y]``) and
    ``tail_weights[i] = [W1 [embedding_dim, hsz_i], W2 [hsz_i, cluster size]]``
    (``embedding(y) = W1 @ W2[:, y - cutoffs[i]]``).

    Args:
        n_classes (int), embedding_dim (int), cutoffs (Sequence[int]), div_value (float): as the
            softmax layer's ``n_classes``, ``in_features``, ``cutoffs`` and ``div_value``.
        weight_attr (ParamAttr|None): attributes of the weights (untied only).
        tied_to (AdaptiveLogSoftmaxWithLoss|None, keyword-only): a softmax with the same ``n_classes``,
            ``cutoffs``, ``div_value`` and ``in_features == embedding_dim`` whose weights this layer uses
            instead of its own: the same Parameter objects (its ``head_weight``, whose first
            ``cutoffs[0]`` columns are the shortlist's embeddings, and its ``tail_weights``), so every
            optimizer and ``DataParallel`` sees each once. The embedding of a class is then exactly
            the vector whose dot product with the softmax's input is that class's logit.
    """

    def __init__(self, n_classes, embedding_dim, cutoffs, div_value=4.0, weight_attr=None, name=None, *,
                 tied_to=None):
        super().__init__()
        embedding_dim, n_classes, cutoffs = _als.check_layer_sizes(embedding_dim, "embedding_dim", n_classes,
                                                                   cutoffs, div_value, _WHERE)
        self.n_classes, self.embedding_dim, self.div_value = n_classes, embedding_dim, div_value
        self.cutoffs = [*cutoffs, n_classes]
        self.tied = tied_to is not None
        if self.tied:
            _check_tie(tied_to, n_classes, embedding_dim, self.cutoffs, div_value)
            self.head_weight = tied_to.head_weight
            self.tail_weights = tied_to.tail_weights  # the softmax's LayerList: its parameters, not copies
            return
        dtype = self._helper.get_default_dtype()

        def weight(shape):
            return self.create_parameter(shape=shape, attr=weight_attr, dtype=dtype, is_bias=False)

        self.head_weight = weight([embedding_dim, self.cutoffs[0]])
        tails = []
        for i in range(len(self.cutoffs) - 1):
            hsz = int(embedding_dim // (div_value ** (i + 1)))
            tails.append(_TailPair(weight([embedding_dim, hsz]), weight([hsz, self.cutoffs[i + 1] - self.cutoffs[i]])))
        self.tail_weights = paddle.nn.LayerList(tails)

    def forward(self, ids):
        """ids [...] integer classes in ``[0, n_classes)`` -> [..., embedding_dim] in the weights' dtype."""
        ids = _as_int64(ids, "ids", _WHERE)
        shape = list(ids.shape)
        flat = _check_label_range(ids.reshape([-1]), self.n_classes, _WHERE, arg="ids.flatten()")
        dtype = self.head_weight.dtype
        shortlist = self.cutoffs[0]
        in_head = flat < shortlist
        # Row gathers from transposed tables: a column gather (index_select on axis 1) and its grad ran
        # about 2x slower. The shortlist gathers every row (a tail row reads class 0, then is zeroed):
        # one gather instead of a row selection, and the output buffer the tails add into.
        head = paddle.gather(_transposed(self.head_weight[:, :shortlist]), paddle.where(in_head, flat, _fill.zeros_like(flat)))
        # (the condition in head's shape: a static where whose condition broadcasts calls zeros_like, which warns)
        out = paddle.where(in_head.unsqueeze(1).expand([-1, head.shape[1]]), head, _fill.zeros_like(head))
        for i, (w1, w2) in enumerate(self.tail_weights):
            low, high = self.cutoffs[i], self.cutoffs[i + 1]
            rows = paddle.nonzero((flat >= low) & (flat < high)).reshape([-1])
            if paddle.in_dynamic_mode() and rows.shape[0] == 0:
                # no id in this cluster: nothing to compute (static graphs run it on 0 rows)
                trained = [w for w in (w1, w2) if not w.stop_gradient] if _grads_must_sync() else []
                if trained:
                    out = _ZeroGrads.apply(out, *trained)
                continue
            rows_of, _ = _with_zero_row(paddle.gather(_transposed(w2), paddle.gather(flat, rows) - low))  # [k, hsz]
            emb = _gemm(rows_of, w1, transpose_y=True)  # [k, embedding_dim]
            out = _index_add(out, rows, _cast(emb, dtype), padded=True)
        return out.reshape(_out_shape(ids, shape, self.embedding_dim))

    def extra_repr(self):
        return (f"n_classes={self.n_classes}, embedding_dim={self.embedding_dim}, cutoffs={self.cutoffs[:-1]}, "
                f"div_value={self.div_value}, tied={self.tied}")


class _Transposed(PyLayer):
    """w.t() whose grad (the transpose of the table's grad) is made contiguous: a strided-view grad of a
    parameter reached paddle.DataParallel's all-reduce scrambled (the untied tables' grads differed)."""

    @staticmethod
    def forward(ctx, w):
        return w.t().contiguous()

    @staticmethod
    def backward(ctx, grad):
        return grad.t().contiguous()


def _transposed(w):
    return _Transposed.apply(w) if paddle.in_dynamic_mode() and not w.stop_gradient else w.t()


@paddle.jit.not_to_static  # plain Python on the static shape: to_static would turn the list into a tensor
def _out_shape(ids, shape, embedding_dim):
    """[*ids.shape, embedding_dim], with -1 for one dynamic dim, or as a tensor when several are dynamic."""
    dims = [d if isinstance(d, int) and d >= 0 else -1 for d in shape]
    if dims.count(-1) > 1:
        return paddle.concat([paddle.shape(ids).astype("int64"), paddle.full([1], embedding_dim, "int64")])
    return [*dims, embedding_dim]


def _check_tie(softmax, n_classes, embedding_dim, cutoffs, div_value):
    if not isinstance(softmax, AdaptiveLogSoftmaxWithLoss):
        raise TypeError(f"{_WHERE}: tied_to must be a paddle_ext.nn.AdaptiveLogSoftmaxWithLoss, got "
                        f"{type(softmax).__name__}")
    mine = {"n_classes": n_classes, "cutoffs": cutoffs[:-1], "div_value": div_value, "in_features": embedding_dim}
    theirs = {"n_classes": softmax.n_classes, "cutoffs": softmax.cutoffs[:-1], "div_value": softmax.div_value,
              "in_features": softmax.in_features}
    for key, value in mine.items():
        if value != theirs[key]:
            name = "embedding_dim" if key == "in_features" else key
            raise ValueError(f"{_WHERE}: tied_to has {key}={theirs[key]!r} but this layer has {name}={value!r}; "
                             f"tying needs them equal")
