"""The transducer demo task learns in a few steps and its export round trip matches."""

import numpy as np

from paddle_ext import demo
from paddle_ext.demo import transducer


def test_generated_task_is_well_formed():
    rng = np.random.default_rng(0)
    prototypes = rng.normal(size=(transducer.VOCAB, transducer.FEAT))
    x, symbols, boundary = transducer.make_batch(16, rng, prototypes)
    assert x.shape[0] == symbols.shape[0] == boundary.shape[0] == 16
    for b in range(16):
        s_len, t_len = boundary[b, 2], boundary[b, 3]
        seq = symbols[b, :s_len]
        assert (seq >= 1).all() and (seq < transducer.VOCAB).all() and (np.diff(seq) != 0).all()
        assert t_len >= 2 * s_len and not x[b, t_len:].any()


def test_edit_distance():
    assert transducer.edit_distance([1, 2, 3], [1, 2, 3]) == 0
    assert transducer.edit_distance([1, 3], [1, 2, 3]) == 1
    assert transducer.edit_distance([], [4, 5]) == 2
    assert transducer.edit_distance([2, 1], [1, 2]) == 2


def test_transducer_demo_learns_and_exports(tmp_path):
    assert "transducer" in demo.tasks()
    result, tdt = demo.tasks()["transducer"].run(steps=60, seed=1, out_dir=tmp_path, log=lambda *a: None)
    assert (result.variant, tdt.variant) == ("rnnt", "tdt")
    simple, pruned = result.losses[:30], result.losses[30:]
    assert np.mean(simple[-5:]) < 0.5 * np.mean(simple[:5])  # rnnt_loss_simple drops
    assert np.isfinite(pruned).all() and np.mean(pruned[-5:]) < np.mean(pruned[:5])  # then simple + pruned drops
    assert result.after < result.before
    assert result.export_match and result.max_abs_diff < 1e-4
    assert np.isfinite(tdt.losses).all() and np.mean(tdt.losses[-5:]) < 0.5 * np.mean(tdt.losses[:5])  # tdt_loss drops
    assert tdt.after < tdt.before and tdt.extra["decode_seconds"] > 0


def test_tdt_greedy_decoding_skips_the_predicted_durations():
    """A joiner that always says 'symbol 3, skip 2 frames' emits one symbol every other frame."""
    model = transducer.Transducer(extra_outputs=len(transducer.DURATIONS))
    import paddle  # noqa: PLC0415

    with paddle.no_grad():
        model.joiner.output_linear.weight.set_value(paddle.zeros_like(model.joiner.output_linear.weight))
        bias = np.full(transducer.VOCAB + len(transducer.DURATIONS), -10.0, np.float32)
        bias[3] = 10.0
        bias[transducer.VOCAB + transducer.DURATIONS.index(2)] = 10.0
        model.joiner.output_linear.bias.set_value(paddle.to_tensor(bias))
    x = np.zeros((2, 9, transducer.FEAT), np.float32)
    boundary = np.array([[0, 0, 4, 9], [0, 0, 2, 4]], np.int64)
    assert transducer.tdt_greedy_decode(model, x, boundary) == [[3] * 5, [3] * 2]


def _constant_joiner(symbol: int) -> transducer.Transducer:
    """A model whose joiner picks `symbol` at every step, whatever it sees."""
    import paddle  # noqa: PLC0415

    model = transducer.Transducer()
    with paddle.no_grad():
        model.joiner.output_linear.weight.set_value(paddle.zeros_like(model.joiner.output_linear.weight))
        bias = np.full(transducer.VOCAB, -10.0, np.float32)
        bias[symbol] = 10.0
        model.joiner.output_linear.bias.set_value(paddle.to_tensor(bias))
    return model


def test_the_error_rate_before_training_counts_every_extra_symbol():
    """What the demo's first error rate means: greedy decoding emits up to 3 symbols a frame, so a joiner that
    never says blank emits 3 T symbols, and each one beyond the reference is an error; emitting nothing is 1."""
    x = np.zeros((2, 9, transducer.FEAT), np.float32)
    symbols = np.array([[3, 1, 2, 4], [5, 6, 1, 1]], np.int64)
    boundary = np.array([[0, 0, 4, 9], [0, 0, 2, 4]], np.int64)
    rate, _, emitted = transducer.symbol_error_rate_timed(_constant_joiner(3), x, symbols, boundary)
    assert emitted == (27 + 12) / 6
    assert rate == (26 + 12) / 6  # 27 threes for [3, 1, 2, 4]: 3 substitutions, 23 insertions
    assert transducer.symbol_error_rate_timed(_constant_joiner(transducer.BLANK), x, symbols, boundary)[::2] == (1.0, 0.0)
    assert "emits 6.5 symbols per reference symbol" in transducer.untrained_baseline(rate, emitted)
