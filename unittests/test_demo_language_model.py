"""The language-model demo (adaptive input tied to the adaptive softmax, and untied) for a few steps on a
small slice of the corpus: both models learn, the tied one has exactly the shared parameters fewer, the
export matches."""

import numpy as np
import pytest

from paddle_ext.demo import language_model

TOKENS, STEPS = 30_000, 150


def test_corpus_is_real_and_sorted_by_frequency():
    ids, vocab, counts = language_model.build_corpus(language_model.stdlib_docstrings(20_000))
    assert len(ids) > 10_000 and len(vocab) > 500
    assert np.all(np.diff(counts) <= 0)  # rank 0 is the most frequent
    assert {"the", "."} <= set(vocab[:10])
    assert ids.max() < len(vocab)


def test_tied_model_counts_the_shared_parameters_once():
    cutoffs = language_model.cutoffs_for(3000)
    tied, untied = (language_model.AdaptiveLM(3000, cutoffs, tied=t) for t in (True, False))
    own = language_model.n_parameters(untied.encoder.embed)
    assert own > 0 and language_model.n_parameters(tied.encoder.embed) > 0
    assert language_model.n_parameters(tied) == language_model.n_parameters(untied) - own
    shared = {id(p) for p in tied.head.parameters()}
    assert all(id(p) in shared for p in tied.encoder.embed.parameters())


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """Both variants trained for STEPS steps on the first ~30k tokens of the corpus."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(language_model, "stdlib_docstrings", lambda limit=TOKENS, f=language_model.stdlib_docstrings: f(TOKENS))
        logs = []
        results = language_model.run(steps=STEPS, seed=0, out_dir=tmp_path_factory.mktemp("lm"), log=logs.append)
    return results, logs


def test_both_variants_learn_well_below_the_unigram_baseline(short_run):
    results, logs = short_run
    assert [(r.task, r.variant) for r in results] == [("language_model", "tied"), ("language_model", "untied")]
    for r in results:
        assert len(r.losses) == STEPS and np.mean(r.losses[-5:]) < np.mean(r.losses[:5]) - 1.0, r.variant
        assert r.after < r.before
        assert r.after < 0.8 * r.extra["unigram_perplexity"] < r.extra["vocabulary"], r.variant
    assert any("perplexity" in line for line in logs)


def test_tied_model_has_fewer_parameters_and_exports(short_run):
    (tied, untied), _ = short_run
    assert tied.extra["parameters"] < untied.extra["parameters"]
    assert tied.export_match and tied.max_abs_diff < 1e-3
    assert untied.export_match is None and untied.max_abs_diff is None  # only the tied model is exported
    assert tied.extra["ms_per_step_adaptive"] > 0 and tied.extra["ms_per_step_full_softmax"] > 0
