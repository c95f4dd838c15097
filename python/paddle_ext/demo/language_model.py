"""Language modelling: a small GRU LM with paddle_ext.nn.AdaptiveLogSoftmaxWithLoss on a real corpus that
every machine has, the docstrings of the Python standard library.

The docstrings of the stdlib modules (their module, class and function docstrings, read
with ``ast`` from the files on disk) are lower-cased and split into words and punctuation; the
vocabulary is sorted by frequency (rare words -> <unk>), so its rank-frequency curve is Zipfian and the
adaptive softmax's cutoffs put the frequent words in the head. Reports held-out perplexity before and
after training, and the time per training step against the same model with a full softmax head.
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
EMBED, HIDDEN = 64, 128
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
    def __init__(self, vocab_size):
        super().__init__()
        self.embed = paddle.nn.Embedding(vocab_size, EMBED)
        self.gru = paddle.nn.GRU(EMBED, HIDDEN)

    def forward(self, tokens):  # [B, T] -> [B*T, HIDDEN]
        hidden, _ = self.gru(self.embed(tokens))
        return hidden.reshape([-1, HIDDEN])


class AdaptiveLM(paddle.nn.Layer):
    """Per-token log p(next token): the layer that is trained and exported."""

    def __init__(self, vocab_size, cutoffs):
        super().__init__()
        self.encoder = GRUEncoder(vocab_size)
        self.head = paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(HIDDEN, vocab_size, cutoffs, div_value=4.0)

    def forward(self, tokens, targets):
        output, _ = self.head(self.encoder(tokens), targets.reshape([-1]))
        return output


class FullSoftmaxLM(paddle.nn.Layer):
    """The same encoder with a full softmax head (Linear + cross_entropy), for the time per step."""

    def __init__(self, vocab_size):
        super().__init__()
        self.encoder = GRUEncoder(vocab_size)
        self.out = paddle.nn.Linear(HIDDEN, vocab_size)

    def forward(self, tokens, targets):
        logits = self.out(self.encoder(tokens))
        return -paddle.nn.functional.cross_entropy(logits, targets.reshape([-1, 1]), reduction="none").reshape([-1])


def batches(ids: np.ndarray, rng: np.random.Generator, size: int = BATCH):
    while True:
        starts = rng.integers(0, len(ids) - SEQ - 1, size=size)
        window = np.stack([ids[s:s + SEQ + 1] for s in starts])
        yield paddle.to_tensor(window[:, :-1]), paddle.to_tensor(window[:, 1:])


def perplexity(model, tokens, targets) -> float:
    with paddle.no_grad():
        return float(np.exp(-model(tokens, targets).numpy().mean()))


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


def run(steps: int, seed: int, out_dir, log=print, ranks: Ranks = Ranks()) -> TaskResult:
    """Every rank draws the same batches and trains on its shard of the sequences (the adaptive softmax
    under DataParallel's default settings). Rank 0 alone times the full-softmax model and exports."""
    rng = np.random.default_rng(seed)
    paddle.seed(seed)
    ids, vocab, counts = build_corpus(stdlib_docstrings())
    split = int(len(ids) * 0.9)
    train_ids, test_ids = ids[:split], ids[split:]
    cutoffs = cutoffs_for(len(vocab))
    head_share = counts[:cutoffs[0]].sum() / counts.sum()
    log(f"   corpus: {len(ids):,} tokens of stdlib docstrings, vocabulary {len(vocab):,} (by frequency: "
        f"{', '.join(vocab[:6])}, …); cutoffs {cutoffs}: the head's {cutoffs[0]} words cover {head_share:.0%}")
    model = AdaptiveLM(len(vocab), cutoffs)
    opt = paddle.optimizer.Adam(learning_rate=3e-3, parameters=model.parameters())
    trained = ranks.wrap(model)
    eval_rng = np.random.default_rng(seed + 1)
    test_tokens, test_targets = next(batches(test_ids, eval_rng, size=4 * BATCH))  # 4096 held-out tokens
    before = perplexity(model, test_tokens, test_targets)
    log(f"   held-out perplexity before training {before:.1f} (uniform would be {len(vocab)})")
    data = batches(train_ids, rng)
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
    train_seconds = time.perf_counter() - start
    spread = ranks.spread_extra(model)
    after = perplexity(model, test_tokens, test_targets)
    log(f"   held-out perplexity {before:.1f} -> {after:.1f}")
    if not ranks.main:
        return TaskResult("language_model", "held-out perplexity", before, after, train_seconds, True, 0.0, losses,
                          spread)
    timing_steps = max(2, min(10, steps))
    adaptive_ms = _time_steps(model, batches(train_ids, np.random.default_rng(seed + 2)), timing_steps) * 1e3
    full_ms = _time_steps(FullSoftmaxLM(len(vocab)), batches(train_ids, np.random.default_rng(seed + 2)),
                          timing_steps) * 1e3
    log(f"   time per training step ({BATCH}x{SEQ} tokens): adaptive softmax {adaptive_ms:.0f} ms, "
        f"full softmax {full_ms:.0f} ms ({full_ms / adaptive_ms:.1f}x)")
    diff = export_and_compare(model, {"tokens": test_tokens.numpy(), "targets": test_targets.numpy()}, out_dir, log)
    extra = {"vocabulary": len(vocab), "tokens": int(len(ids)), "cutoffs": cutoffs,
             "ms_per_step_adaptive": adaptive_ms, "ms_per_step_full_softmax": full_ms, **spread}
    return TaskResult("language_model", "held-out perplexity", before, after, train_seconds, diff < 1e-3, diff, losses,
                      extra)


TASK = DemoTask("language_model", "GRU language model on stdlib docstrings with AdaptiveLogSoftmaxWithLoss", 300, run)
