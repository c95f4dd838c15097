"""Language modelling: a small GRU LM with paddle_ext.nn.AdaptiveEmbedding as its input and
paddle_ext.nn.AdaptiveLogSoftmaxWithLoss as its output, on a real corpus that every machine has, the
docstrings of the Python standard library.

The docstrings of the stdlib modules (their module, class and function docstrings, read
with ``ast`` from the files on disk) are lower-cased and split into words and punctuation; the
vocabulary is sorted by frequency (rare words -> <unk>), so its rank-frequency curve is Zipfian and the
adaptive softmax's cutoffs put the frequent words in the head. Trains the model twice, with the adaptive
input tied to the softmax (the same Parameter objects) and untied (its own weights), and reports held-out
perplexity before and after training and the parameter count of each, and the time per training step
against the same model with a full softmax head.
"""

from __future__ import annotations

import ast
import collections
import pathlib
import re
import sysconfig
import time

import numpy as np
import paddle

import paddle_ext

from . import DemoTask, TaskResult
from ._parallel import Ranks
from .export import export_and_compare

MAX_TOKENS = 600_000  # corpus cap (the first stdlib files in sorted order), keeps the demo minutes-long
MIN_COUNT = 2  # rarer words become <unk>
SKIP_DIRS = {"test", "tests", "idlelib", "site-packages", "dist-packages", "turtledemo", "__pycache__"}
HIDDEN = 128  # also the embedding width: tying needs the softmax's in_features
DIV = 4.0
BATCH, SEQ = 32, 32
TOKEN_RE = re.compile(r"[a-z]+|[0-9]+|[^\sa-z0-9]")


def stdlib_docstrings(limit_tokens: int = MAX_TOKENS) -> list[str]:
    """Docstrings of this interpreter's standard library .py files (test suites and third-party packages
    left out), in sorted path order, until about ``limit_tokens`` words."""
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    docs, tokens = [], 0
    paths = sorted(p for p in root.rglob("*.py") if not SKIP_DIRS & set(p.relative_to(root).parts[:-1]))
    for path in paths:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    docs.append(doc)
                    tokens += len(doc.split())
        if tokens >= limit_tokens:
            break
    return docs


def build_corpus(docs: list[str], min_count: int = MIN_COUNT):
    """Token ids (vocabulary sorted by decreasing frequency, <eos> between docstrings) and the vocabulary."""
    tokenized = [TOKEN_RE.findall(d.lower()) + ["<eos>"] for d in docs]
    counts = collections.Counter(t for doc in tokenized for t in doc)
    kept = {w: c for w, c in counts.items() if c >= min_count}
    kept["<unk>"] = sum(c for c in counts.values() if c < min_count)
    vocab = sorted(kept, key=lambda w: (-kept[w], w))
    index = {w: i for i, w in enumerate(vocab)}
    unk = index["<unk>"]
    ids = np.fromiter((index.get(t, unk) for doc in tokenized for t in doc), dtype=np.int64)
    return ids, vocab, np.array([kept[w] for w in vocab])


def cutoffs_for(vocab_size: int) -> list[int]:
    return [c for c in (500, 2000, 8000) if c < vocab_size - 1] or [max(1, vocab_size // 2)]


class GRUEncoder(paddle.nn.Layer):
    def __init__(self, embed):
        super().__init__()
        self.embed = embed
        self.gru = paddle.nn.GRU(HIDDEN, HIDDEN)

    def forward(self, tokens):  # [B, T] -> [B*T, HIDDEN]
        hidden, _ = self.gru(self.embed(tokens))
        return hidden.reshape([-1, HIDDEN])


class AdaptiveLM(paddle.nn.Layer):
    """Per-token log p(next token): adaptive input (AdaptiveEmbedding) -> GRU -> adaptive softmax. Tied, the
    embedding uses the softmax's own Parameter objects (its head table and tail projections)."""

    def __init__(self, vocab_size, cutoffs, tied=True):
        super().__init__()
        self.head = paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(HIDDEN, vocab_size, cutoffs, div_value=DIV)
        self.encoder = GRUEncoder(paddle_ext.nn.AdaptiveEmbedding(vocab_size, HIDDEN, cutoffs, div_value=DIV,
                                                                  tied_to=self.head if tied else None))

    def forward(self, tokens, targets):
        output, _ = self.head(self.encoder(tokens), targets.reshape([-1]))
        return output


class FullSoftmaxLM(paddle.nn.Layer):
    """The untied model's encoder with a full softmax head (Linear + cross_entropy), for the time per step."""

    def __init__(self, vocab_size, cutoffs):
        super().__init__()
        self.encoder = GRUEncoder(paddle_ext.nn.AdaptiveEmbedding(vocab_size, HIDDEN, cutoffs, div_value=DIV))
        self.out = paddle.nn.Linear(HIDDEN, vocab_size)

    def forward(self, tokens, targets):
        logits = self.out(self.encoder(tokens))
        return -paddle.nn.functional.cross_entropy(logits, targets.reshape([-1, 1]), reduction="none").reshape([-1])


def n_parameters(model) -> int:
    """Scalars in ``model.parameters()`` (a Parameter shared by two sublayers is listed, and counted, once)."""
    return sum(int(np.prod(p.shape)) for p in model.parameters())


def batches(ids: np.ndarray, rng: np.random.Generator, size: int = BATCH):
    while True:
        starts = rng.integers(0, len(ids) - SEQ - 1, size=size)
        window = np.stack([ids[s:s + SEQ + 1] for s in starts])
        yield paddle.to_tensor(window[:, :-1]), paddle.to_tensor(window[:, 1:])


def perplexity(model, tokens, targets) -> float:
    with paddle.no_grad():
        return float(np.exp(-model(tokens, targets).numpy().mean()))


def unigram_perplexity(train_ids, targets, vocab_size) -> float:
    """Held-out perplexity of the add-one unigram model of the training tokens: the bar a trained LM must clear."""
    p = (np.bincount(train_ids, minlength=vocab_size) + 1.0) / (len(train_ids) + vocab_size)
    return float(np.exp(-np.log(p[targets]).mean()))


def _time_steps(model, data, steps) -> float:
    opt = paddle.optimizer.Adam(learning_rate=3e-3, parameters=model.parameters())
    tokens, targets = next(data)
    (-model(tokens, targets).mean()).backward()  # warm-up
    opt.clear_grad()
    start = time.perf_counter()
    for _ in range(steps):
        tokens, targets = next(data)
        (-model(tokens, targets).mean()).backward()
        opt.step()
        opt.clear_grad()
    return (time.perf_counter() - start) / steps


def _train(model, data, steps, ranks, log) -> tuple[list[float], float, paddle.nn.Layer]:
    """Adam on this rank's shard of each batch (the model under DataParallel's default settings over several
    ranks); the losses averaged over the ranks, the training time, and the trained (wrapped) layer."""
    opt = paddle.optimizer.Adam(learning_rate=3e-3, parameters=model.parameters())
    trained = ranks.wrap(model)
    losses, start = [], time.perf_counter()
    for step in range(steps):
        tokens, targets = (ranks.shard(t) for t in next(data))
        loss = -trained(tokens, targets).mean()
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(ranks.mean(float(loss)))
        if step % max(1, steps // 5) == 0 or step == steps - 1:
            log(f"   step {step:4d}  loss {losses[-1]:.4f}  ({(time.perf_counter() - start) / (step + 1) * 1e3:.0f} ms/step)")
    return losses, time.perf_counter() - start, trained


VARIANTS = {"tied": True, "untied": False}  # AdaptiveEmbedding tied_to the softmax, or with its own weights


def run(steps: int, seed: int, out_dir, log=print, ranks: Ranks = Ranks()) -> list[TaskResult]:
    """Trains the tied and the untied model (same seed, same batches) and returns a result for each. Every
    rank draws the same batches and trains on its shard of the sequences (the adaptive softmax and input
    under DataParallel's default settings). Rank 0 alone times the full-softmax model and exports the tied one."""
    paddle.seed(seed)
    ids, vocab, counts = build_corpus(stdlib_docstrings())
    split = int(len(ids) * 0.9)
    train_ids, test_ids = ids[:split], ids[split:]
    cutoffs = cutoffs_for(len(vocab))
    head_share = counts[:cutoffs[0]].sum() / counts.sum()
    log(f"   corpus: {len(ids):,} tokens of stdlib docstrings, vocabulary {len(vocab):,} (by frequency: "
        f"{', '.join(vocab[:6])}, …); cutoffs {cutoffs}: the head's {cutoffs[0]} words cover {head_share:.0%}")
    eval_rng = np.random.default_rng(seed + 1)
    test_tokens, test_targets = next(batches(test_ids, eval_rng, size=4 * BATCH))  # 4096 held-out tokens
    unigram = unigram_perplexity(train_ids, test_targets.numpy().reshape(-1), len(vocab))
    log(f"   held-out perplexity of the unigram model {unigram:.1f} (uniform would be {len(vocab)})")
    # the DataParallel wrappers are kept while their models are used: a freed one's reducer hooks stay on the
    # parameters, and the next backward (rank 0's timing steps) crashed in them
    results, models, wrappers = [], {}, []
    for variant, tied in VARIANTS.items():
        paddle.seed(seed)
        model = models[variant] = AdaptiveLM(len(vocab), cutoffs, tied=tied)
        before = perplexity(model, test_tokens, test_targets)
        log(f"   {variant} adaptive input: {n_parameters(model):,} parameters, held-out perplexity before "
            f"training {before:.1f}")
        losses, seconds, trained = _train(model, batches(train_ids, np.random.default_rng(seed)), steps, ranks, log)
        wrappers.append(trained)
        after = perplexity(model, test_tokens, test_targets)
        log(f"   {variant}: held-out perplexity {before:.1f} -> {after:.1f}")
        extra = {"vocabulary": len(vocab), "tokens": int(len(ids)), "cutoffs": cutoffs, "parameters": n_parameters(model),
                 "unigram_perplexity": unigram, **ranks.spread_extra(model)}
        results.append(TaskResult("language_model", "held-out perplexity", before, after, seconds, None, None,
                                  losses, extra, variant=variant))
    if not ranks.main:
        return results
    timing_steps = max(2, min(10, steps))
    adaptive_ms = _time_steps(models["tied"], batches(train_ids, np.random.default_rng(seed + 2)), timing_steps) * 1e3
    full_ms = _time_steps(FullSoftmaxLM(len(vocab), cutoffs), batches(train_ids, np.random.default_rng(seed + 2)),
                          timing_steps) * 1e3
    log(f"   time per training step ({BATCH}x{SEQ} tokens): adaptive softmax {adaptive_ms:.0f} ms, "
        f"full softmax {full_ms:.0f} ms ({full_ms / adaptive_ms:.1f}x)")
    tied = results[0]
    tied.max_abs_diff = export_and_compare(models["tied"], {"tokens": test_tokens.numpy(),
                                                            "targets": test_targets.numpy()}, out_dir, log)
    tied.export_match = tied.max_abs_diff < 1e-3
    tied.extra.update(ms_per_step_adaptive=adaptive_ms, ms_per_step_full_softmax=full_ms)
    return results


TASK = DemoTask("language_model", "GRU language model on stdlib docstrings, adaptive input tied to the adaptive softmax",
                300, run)
