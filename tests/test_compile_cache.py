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


# --- nutpie's C wrappers, cached between processes (cache.compile_nutpie) -----------------------

_CHILD = """
import json
import numpy as np
import nutpie
import pymc as pm
from bayes_energy.models import cache, default_config
from bayes_energy.models.build import build_model
from bayes_energy.models.spec import ModelSpec
from bayes_energy.simulate import tiny_sweep

cache.enable_compile_cache()
df = tiny_sweep(0)
ours = build_model(ModelSpec.from_table(df, "pooled", default_config("pooled")), df)
with pm.Model() as small:  # what our wrappers' closures hold (pm.Data, a Student-t), compiled afresh in ~11 s
    x = pm.Data("x", np.linspace(0.0, 1.0, 12))
    a, b = pm.Normal("a"), pm.Normal("b")
    pm.StudentT("y", nu=pm.Gamma("nu", 2.0, 0.1), mu=a + b * x, sigma=pm.HalfNormal("s"),
                observed=np.sin(np.arange(12.0)))

def hits(compiled):
    return [compiled.compiled_logp_func.cache_hits, compiled.compiled_expand_func.cache_hits]

def run(model):
    compiled = cache.compile_nutpie(model)
    idata = nutpie.sample(compiled, draws=30, tune=30, chains=1, seed=3, progress_bar=False)
    return hits(compiled), [float(v) for name in sorted(idata.posterior.data_vars) for v in idata.posterior[name].values.ravel()]

out = {"hits": hits(cache.compile_nutpie(ours))}  # our model's wrappers: only whether they come from the cache
out["small_hits"], out["draws"] = run(small)
if FRESH:  # the small model with both wrappers compiled afresh in this process, for comparison
    def no_key(func):
        raise cache._Unkeyable("test: compile this wrapper afresh")
    cache._closure_key = no_key
    out["fresh_hits"], out["fresh_draws"] = run(small)
print(json.dumps(out))
"""


def _child(fresh: bool) -> dict:
    import json

    out = subprocess.run([sys.executable, "-c", _CHILD.replace("FRESH", repr(fresh))], capture_output=True, check=False,
                         text=True, timeout=600, env=dict(os.environ, BAYES_ENERGY_NO_COMPILE_CACHE=""))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_second_process_loads_both_wrappers_and_draws_exactly_what_a_fresh_compile_draws():
    import nutpie.compile_pymc as source

    _child(fresh=False)  # fills the cache (or finds it filled)
    # as if nutpie had been installed again (a new virtual environment): its source file's time changes
    st = os.stat(source.__file__)
    os.utime(source.__file__, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    try:
        second = _child(fresh=True)
    finally:
        os.utime(source.__file__, ns=(st.st_atime_ns, st.st_mtime_ns))
    # our pooled model's log-density and expand wrappers, and the small model's, come from the cache
    assert second["hits"] == [1, 1], "the pooled model's wrappers were compiled again"
    assert second["small_hits"] == [1, 1], "the small model's wrappers were compiled again"
    assert second["fresh_hits"] == [0, 0]
    assert len(second["draws"]) > 30 and np.isfinite(second["draws"]).all()
    assert second["draws"] == second["fresh_draws"]  # bit for bit: same machine code


def _closure(values, scale):
    def wrapper(x):
        return x * values.sum() * scale
    return wrapper


def test_the_wrapper_key_is_stable_and_follows_what_the_wrapper_bakes_in():
    from bayes_energy.models.cache import _closure_key

    base = _closure_key(_closure(np.arange(3.0), 2))
    assert base == _closure_key(_closure(np.arange(3.0), 2))  # rebuilt closure, same key
    assert base != _closure_key(_closure(np.arange(4.0), 2))  # another shape
    assert base != _closure_key(_closure(np.array([0.0, 1.0, 3.0]), 2))  # another value
    assert base != _closure_key(_closure(np.arange(3.0), 3))


def test_a_set_in_the_closure_gets_the_same_key_whatever_the_process_hash_seed():
    # a frozenset iterates in string-hash order, which Python randomises per process
    code = (
        "from bayes_energy.models.cache import _closure_key\n"
        "names = frozenset(f'x{i}' for i in range(20))\n"
        "def wrapper(x):\n    return x if 'x3' in names else -x\n"
        "print(_closure_key(wrapper))"
    )
    keys = {
        subprocess.run(
            [sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    assert len(keys) == 1, keys


def test_a_closure_the_key_cannot_describe_is_refused_not_guessed():
    from bayes_energy.models.cache import _closure_key, _Unkeyable

    class Opaque:
        pass

    with pytest.raises(_Unkeyable, match="Opaque"):
        _closure_key(_closure(Opaque(), 1))
