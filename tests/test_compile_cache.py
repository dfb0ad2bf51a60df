"""The compile cache (models/cache.py) swaps PyTensor's digamma for our own: it must be the same function."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from scipy import special

from bayes_energy.models.cache import _digamma_py, digamma


def test_digamma_matches_scipy_where_the_student_t_gradient_needs_it():
    # nu (degrees of freedom) and (nu + 1) / 2 live in (0, inf); check far beyond, too
    x = np.concatenate([np.geomspace(1e-3, 1e6, 400), np.linspace(0.5, 60, 400), [1.0, 2.0, 10.0, 1e17, 1e20]])
    ours = np.array([digamma(v) for v in x])
    np.testing.assert_allclose(ours, special.psi(x), rtol=1e-13, atol=5e-15)


@pytest.mark.parametrize("x", [0.0, -1.0, -2.0, np.inf, np.nan, -0.5, -2.7])
def test_digamma_special_values_match_scipy(x):
    ours, ref = _digamma_py(float(x)), float(special.psi(x))
    if np.isnan(ref):
        assert np.isnan(ours)
    else:
        assert ours == pytest.approx(ref, rel=1e-12, abs=1e-14)


def test_every_model_build_enables_the_cache_and_the_variable_turns_it_off():
    code = ("import pandas as pd; from bayes_energy.models import cache; from bayes_energy.models.build import build_model; from bayes_energy.models import default_config;"
            "from bayes_energy.models.spec import ModelSpec; from bayes_energy.simulate import tiny_sweep;"
            "df = tiny_sweep(0); build_model(ModelSpec.from_table(df, 'pooled', default_config('pooled')), df); print(cache._ENABLED)")
    for flag, expect in (("", "True"), ("1", "False")):
        env = dict(os.environ, BAYES_ENERGY_NO_COMPILE_CACHE=flag)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip().splitlines()[-1] == expect
