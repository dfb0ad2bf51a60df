"""One loaded-posterior object: checked once, and predict/plan take it or the InferenceData alike."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest


def test_load_posterior_checks_once_and_predict_and_plan_reuse_it(small_fit_dir, monkeypatch):
    import bayes_energy as be
    from bayes_energy.models import io

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = io.load_posterior(small_fit_dir / "posterior.nc")
    assert post.spec.name == "hierarchical" and len(post.table) == 629
    assert post.source.endswith("posterior.nc")
    calls = []
    real = io.load_spec
    monkeypatch.setattr(io, "load_spec", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert io.posterior_of(post.idata).spec is post.spec  # the InferenceData alone finds what load derived
    w = {"family": "bert", "num_layers": 12, "hidden_size": 768, "ff": 3072, "seq_len": 128, "batch_size": 16,
         "tokens": 2_000_000}
    cols = ["hardware", "family", "num_layers", "hidden_size", "ff", "seq_len", "batch_size", "tokens", "strategy",
            "n_gpus"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        by_object = be.plan(post, w, n_gpus=[1, 2, 4], seed=1)
        by_idata = be.plan(post.idata, w, n_gpus=[1, 2, 4], seed=1)
        cands = by_object.table[cols].head(4)
        a = be.predict(post, cands, seed=2)
        b = be.predict(post.idata, cands, seed=2)
    assert not calls, "the spec was derived again"
    pd.testing.assert_frame_equal(by_object.table, by_idata.table)
    np.testing.assert_array_equal(a["energy_kwh_median"], b["energy_kwh_median"])


def test_posterior_of_refuses_what_is_not_a_posterior():
    from bayes_energy.models.io import posterior_of

    with pytest.raises(TypeError, match="expected a posterior"):
        posterior_of({"posterior": None})
