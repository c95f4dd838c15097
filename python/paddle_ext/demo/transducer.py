"""Speech-style transduction: a tiny transducer (encoder + predictor + joiner) trained with the RNN-T losses.

The task is generated: a symbol sequence (no immediate repeats) is "spoken" as noisy frames, each
symbol lasting 2-4 frames with 0-2 frames of silence around it, so the alignment is unknown and the
model has to learn it. Training follows k2's pruned recipe: first ``rnnt_loss_simple`` alone (an
additive joiner on projections of the encoder and predictor outputs), then ``rnnt_loss_simple`` plus
the pruned loss on the full (non-linear) joiner, ``paddle_ext.nn.TransducerJoiner``, evaluated only inside
the ranges that ``get_rnnt_prune_ranges`` picks from the simple loss's occupation grads (its ``rnnt_loss``
with ``ranges``: the joiner fused into the loss). The metric is the greedy-
decoding symbol error rate (edit distance / reference length) on held-out utterances.

A second model, a Token-and-Duration Transducer (its joiner's fused ``tdt_loss``, durations 0-4), trains on the same batches
with the same encoder and predictor; its joiner also predicts how many frames each token covers, and its
greedy decoding skips those frames. Both rows report the error rate and the decoding time.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import paddle

import paddle_ext

from . import DemoTask, TaskResult
from ._parallel import Ranks
from ..nn import TransducerJoiner
from .export import export_and_compare

VOCAB = 8  # symbol 0 is the blank; real symbols 1..7
FEAT = 16
HIDDEN = 64
BLANK = 0
S_RANGE = 3
DURATIONS = [0, 1, 2, 3, 4]  # the TDT model's frame skips


def make_batch(n: int, rng: np.random.Generator, prototypes: np.ndarray, max_symbols=6, noise=0.6):
    """(frames [n, T, FEAT], symbols [n, S], boundary [n, 4]) padded; symbols padded with 1s (masked by boundary)."""
    seqs, feats = [], []
    for _ in range(n):
        length = int(rng.integers(2, max_symbols + 1))
        seq = [int(rng.integers(1, VOCAB))]
        while len(seq) < length:
            s = int(rng.integers(1, VOCAB))
            if s != seq[-1]:
                seq.append(s)
        frames = []
        for s in seq:
            frames += [BLANK] * int(rng.integers(0, 3)) + [s] * int(rng.integers(2, 5))
        frames += [BLANK] * int(rng.integers(0, 3))
        feats.append(prototypes[frames] + noise * rng.normal(size=(len(frames), FEAT)))
        seqs.append(seq)
    T = max(len(f) for f in feats)
    S = max(len(s) for s in seqs)
    x = np.zeros((n, T, FEAT), np.float32)
    symbols = np.ones((n, S), np.int64)
    boundary = np.zeros((n, 4), np.int64)
    for i, (f, s) in enumerate(zip(feats, seqs)):
        x[i, :len(f)] = f
        symbols[i, :len(s)] = s
        boundary[i] = (0, 0, len(s), len(f))
    return x, symbols, boundary


class Transducer(paddle.nn.Layer):
    def __init__(self, extra_outputs: int = 0):
        """extra_outputs: units after the VOCAB token logits of the full joiner (the TDT duration head)."""
        super().__init__()
        self.enc_in = paddle.nn.Linear(FEAT, HIDDEN)
        self.enc_conv = paddle.nn.Conv1D(HIDDEN, HIDDEN, 5, padding=2)  # sees +-2 frames
        self.pred_emb = paddle.nn.Embedding(VOCAB, HIDDEN)  # stateless predictor: the last symbol
        self.am_proj = paddle.nn.Linear(HIDDEN, VOCAB)  # the simple loss's additive joiner
        self.lm_proj = paddle.nn.Linear(HIDDEN, VOCAB)
        # the full joiner, whose losses never form its [B, T, S+1, VOCAB] logits (the fused ops)
        self.joiner = TransducerJoiner(HIDDEN, HIDDEN, HIDDEN, VOCAB + extra_outputs)

    def encode(self, x):
        h = paddle.tanh(self.enc_in(x))  # [B, T, H]
        return paddle.tanh(self.enc_conv(h.transpose([0, 2, 1])).transpose([0, 2, 1])) + h

    def predict(self, symbols):
        """Predictor outputs for contexts [blank] + symbols: [B, S+1, H]."""
        context = paddle.concat([paddle.full([symbols.shape[0], 1], BLANK, dtype="int64"), symbols], axis=1)
        return paddle.tanh(self.pred_emb(context))

    def forward(self, x, symbols, boundary, pruned: bool):
        """The training loss and the loss shown in the log: see train_step."""
        return train_step(self, x, symbols, boundary, pruned)


class Scorer(paddle.nn.Layer):
    """What gets exported: per-utterance negative log-likelihood under the additive joiner
    (rnnt_loss_simple, reduction 'none') and the encoder's frame-level symbol logits."""

    def __init__(self, model: Transducer):
        super().__init__()
        self.model = model

    def forward(self, x, symbols, boundary):
        enc = self.model.encode(x)
        am = self.model.am_proj(enc)
        lm = self.model.lm_proj(self.model.predict(symbols))
        nll = paddle_ext.rnnt_loss_simple(lm, am, symbols, BLANK, boundary, reduction="none")
        return nll, am


def greedy_decode(model: Transducer, x: np.ndarray, boundary: np.ndarray, max_per_frame: int = 3):
    """Frame-synchronous greedy search with the full joiner, batched; returns lists of symbols."""
    B, T, _ = x.shape
    with paddle.no_grad():
        enc = model.encode(paddle.to_tensor(x))  # [B, T, H]
        joiner = model.joiner
        enc_j = joiner.encoder_proj(enc)
        last = np.full(B, BLANK, np.int64)
        hyps = [[] for _ in range(B)]
        for t in range(T):
            active = t < boundary[:, 3]
            for _ in range(max_per_frame):
                pred = joiner.decoder_proj(paddle.tanh(model.pred_emb(paddle.to_tensor(last))))
                logits = joiner.output_linear(paddle.tanh(enc_j[:, t] + pred))
                best = logits.argmax(-1).numpy()
                emit = active & (best != BLANK)
                if not emit.any():
                    break
                for b in np.nonzero(emit)[0]:
                    hyps[b].append(int(best[b]))
                last = np.where(emit, best, last)
                active = emit
    return hyps


def tdt_greedy_decode(model: Transducer, x: np.ndarray, boundary: np.ndarray, max_per_frame: int = 3):
    """TDT greedy search, batched: at frame t the joiner picks a token and a duration; a symbol is emitted,
    and the search moves on by the duration (a blank moves at least one frame, and so does the
    max_per_frame-th symbol in a row on one frame), skipping the frames in between."""
    B = x.shape[0]
    with paddle.no_grad():
        enc_j = model.joiner.encoder_proj(model.encode(paddle.to_tensor(x))).numpy()  # [B, T, H]
    t = np.zeros(B, np.int64)
    last = np.full(B, BLANK, np.int64)
    on_frame = np.zeros(B, np.int64)  # symbols emitted on the current frame
    hyps = [[] for _ in range(B)]
    durations = np.array(DURATIONS)
    active = t < boundary[:, 3]
    with paddle.no_grad():
        while active.any():
            rows = np.nonzero(active)[0]
            pred = model.joiner.decoder_proj(paddle.tanh(model.pred_emb(paddle.to_tensor(last[rows]))))
            out = model.joiner.output_linear(paddle.tanh(paddle.to_tensor(enc_j[rows, t[rows]]) + pred)).numpy()
            token, skip = out[:, :VOCAB].argmax(-1), durations[out[:, VOCAB:].argmax(-1)]
            for i, b in enumerate(rows):
                step = int(skip[i])
                if token[i] != BLANK:
                    hyps[b].append(int(token[i]))
                    last[b] = token[i]
                    on_frame[b] += 1
                if step == 0 and (token[i] == BLANK or on_frame[b] >= max_per_frame):
                    step = 1
                if step > 0:
                    t[b] += step
                    on_frame[b] = 0
            active = t < boundary[:, 3]
    return hyps


def edit_distance(a, b) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def symbol_error_rate_timed(model, x, symbols, boundary, decode=greedy_decode):
    """(symbol error rate, seconds the decoding took, symbols emitted per reference symbol)."""
    start = time.perf_counter()
    hyps = decode(model, x, boundary)
    seconds = time.perf_counter() - start
    refs = [list(symbols[i, :boundary[i, 2]]) for i in range(len(hyps))]
    total = sum(len(r) for r in refs)
    return sum(edit_distance(h, r) for h, r in zip(hyps, refs)) / total, seconds, sum(map(len, hyps)) / total


def untrained_baseline(rate: float, emitted: float) -> str:
    """What the error rate before training means: the edit distance counts every symbol emitted beyond the
    reference, so an untrained joiner that emits a symbol at most steps scores far above 1 (emitting
    nothing would score exactly 1)."""
    return (f"before training: greedy symbol error rate {rate:.3f}, as the untrained joiner emits {emitted:.1f} "
            f"symbols per reference symbol (each extra one is an error; emitting nothing scores 1.000)")


def train_step(model, x, symbols, boundary, pruned: bool):
    enc = model.encode(x)
    pred = model.predict(symbols)
    simple, (px_grad, py_grad) = paddle_ext.rnnt_loss_simple(model.lm_proj(pred), model.am_proj(enc), symbols, BLANK,
                                                             boundary, reduction="mean", return_grad=True)
    if not pruned:
        return simple, simple
    ranges = paddle_ext.get_rnnt_prune_ranges(px_grad, py_grad, boundary, S_RANGE)
    # the pruned loss on the joiner inside the ranges, fused: no [B, T, S_RANGE, VOCAB] logits
    pruned_loss = model.joiner.rnnt_loss(enc, pred, symbols, BLANK, boundary, reduction="mean", ranges=ranges)
    return 0.5 * simple + pruned_loss, pruned_loss


def tdt_train_step(model, x, symbols, boundary):
    """tdt_loss on the full joiner (VOCAB + len(DURATIONS) outputs), fused: its logits are never formed."""
    return model.joiner.tdt_loss(model.encode(x), model.predict(symbols), symbols, DURATIONS, BLANK, boundary,
                                 reduction="mean")


class TdtTrainer(paddle.nn.Layer):
    def __init__(self, model: Transducer):
        super().__init__()
        self.model = model

    def forward(self, x, symbols, boundary):
        return tdt_train_step(self.model, x, symbols, boundary)


def run_tdt(steps: int, seed: int, data, log, ranks: Ranks) -> TaskResult:
    """The TDT model on the same batches (the same generator seed) as the RNN-T model."""
    prototypes, x_test, s_test, b_test, batch_rng = data
    paddle.seed(seed)
    model = Transducer(extra_outputs=len(DURATIONS))
    opt = paddle.optimizer.Adam(learning_rate=3e-3, parameters=model.parameters())
    trained = ranks.wrap(TdtTrainer(model))
    before, _, emitted = symbol_error_rate_timed(model, x_test, s_test, b_test, tdt_greedy_decode)
    log(f"   TDT {untrained_baseline(before, emitted)}")
    losses, start = [], time.perf_counter()
    for step in range(steps):
        x, symbols, boundary = (paddle.to_tensor(ranks.shard(a)) for a in make_batch(32, batch_rng, prototypes))
        loss = trained(x, symbols, boundary)
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(ranks.mean(float(loss)))
        if step % max(1, steps // 6) == 0 or step == steps - 1:
            log(f"   step {step:4d}  tdt_loss {losses[-1]:.4f}")
    train_seconds = time.perf_counter() - start
    after, decode_seconds, _ = symbol_error_rate_timed(model, x_test, s_test, b_test, tdt_greedy_decode)
    log(f"   TDT greedy symbol error rate {before:.3f} -> {after:.3f}, decoding {decode_seconds * 1e3:.0f} ms "
        f"({len(x_test)} utterances; durations {DURATIONS})")
    extra = {"durations": DURATIONS, "decode_seconds": decode_seconds, **ranks.spread_extra(model)}
    return TaskResult("transducer", "greedy symbol error rate", before, after, train_seconds, None, None, losses,
                      extra, variant="tdt")


def run(steps: int, seed: int, out_dir, log=print, ranks: Ranks = Ranks()) -> list[TaskResult]:
    """Every rank draws the same batches and trains on its shard of the utterances. The full joiner
    first takes part after the warm-up, so DataParallel needs find_unused_parameters=True here."""
    rng = np.random.default_rng(seed)
    paddle.seed(seed)
    prototypes = rng.normal(size=(VOCAB, FEAT)).astype(np.float32)
    prototypes[BLANK] *= 0.3  # silence: quieter frames
    x_test, s_test, b_test = make_batch(200, rng, prototypes)
    model = Transducer()
    opt = paddle.optimizer.Adam(learning_rate=3e-3, parameters=model.parameters())
    trained = ranks.wrap(model, find_unused_parameters=True)
    before, _, emitted = symbol_error_rate_timed(model, x_test, s_test, b_test)
    log(f"   {len(x_test)} held-out utterances, vocab {VOCAB - 1} + blank")
    log(f"   {untrained_baseline(before, emitted)}")
    tdt_batches = copy.deepcopy(rng)  # the TDT model gets the very same batches
    losses, start = [], time.perf_counter()
    warmup = steps // 2
    for step in range(steps):
        x, symbols, boundary = (paddle.to_tensor(ranks.shard(a)) for a in make_batch(32, rng, prototypes))
        loss, shown = trained(x, symbols, boundary, pruned=step >= warmup)
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(ranks.mean(float(loss)))
        if step % max(1, steps // 6) == 0 or step == steps - 1 or step == warmup:
            if step < warmup:
                log(f"   step {step:4d}  rnnt_loss_simple {losses[-1]:.4f}")
            else:
                log(f"   step {step:4d}  0.5 * simple + pruned {losses[-1]:.4f} "
                    f"(rnnt_loss_pruned {ranks.mean(float(shown)):.4f})")
    train_seconds = time.perf_counter() - start
    extra = {"s_range": S_RANGE, "warmup_steps": warmup, **ranks.spread_extra(model)}
    after, decode_seconds, _ = symbol_error_rate_timed(model, x_test, s_test, b_test)
    extra["decode_seconds"] = decode_seconds
    log(f"   greedy symbol error rate {before:.3f} -> {after:.3f}, decoding {decode_seconds * 1e3:.0f} ms")
    scorer = Scorer(model)
    diff = export_and_compare(scorer, {"x": x_test[:16], "symbols": s_test[:16], "boundary": b_test[:16]}, out_dir,
                              log) if ranks.main else 0.0
    rnnt = TaskResult("transducer", "greedy symbol error rate", before, after, train_seconds, diff < 1e-4, diff,
                      losses, extra, variant="rnnt")
    log("   the TDT model (tdt_loss) on the same batches:")
    return [rnnt, run_tdt(steps, seed, (prototypes, x_test, s_test, b_test, tdt_batches), log, ranks)]


TASK = DemoTask("transducer", "tiny transducer: rnnt_loss_simple then rnnt_loss_pruned; a TDT model (tdt_loss)",
                400, run)
