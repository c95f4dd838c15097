"""The language-model demo for a few steps on a small slice of the corpus: loss drops, export matches."""

import numpy as np

from paddle_ext.demo import language_model


def test_corpus_is_real_and_sorted_by_frequency():
    ids, vocab, counts = language_model.build_corpus(language_model.stdlib_docstrings(20_000))
    assert len(ids) > 10_000 and len(vocab) > 500
    assert np.all(np.diff(counts) <= 0)  # rank 0 is the most frequent
    assert {"the", "."} <= set(vocab[:10])
    assert ids.max() < len(vocab)


def test_a_few_steps_lower_the_loss_and_export_matches(tmp_path, monkeypatch):
    monkeypatch.setattr(language_model, "MAX_TOKENS", 30_000)
    monkeypatch.setattr(language_model, "stdlib_docstrings",
                        lambda limit=30_000, f=language_model.stdlib_docstrings: f(limit))
    logs = []
    result = language_model.run(steps=12, seed=0, out_dir=tmp_path, log=logs.append)
    assert result.task == "language_model" and len(result.losses) == 12
    assert np.mean(result.losses[-3:]) < np.mean(result.losses[:3])
    assert result.after < result.before
    assert result.export_match and result.max_abs_diff < 1e-3
    assert result.extra["ms_per_step_adaptive"] > 0 and result.extra["ms_per_step_full_softmax"] > 0
    assert any("perplexity" in line for line in logs)
