"""Fit a Bayesian energy model: spec -> build -> sample, with provenance.

The returned :class:`arviz.InferenceData` holds ``posterior``,
``sample_stats``, ``log_likelihood``, ``posterior_predictive``,
``observed_data``, ``constant_data`` and a ``training_table`` group, and its
``posterior.attrs`` carry the model name, the config as JSON, the package
version and a hash of the training table, so :func:`bayes_energy.models.io.load`
can rebuild the model from the file alone.
"""

from __future__ import annotations

import json
import warnings

import arviz as az
import numpy as np
import pandas as pd
import pymc as pm
import xarray as xr

from .. import __version__, threads
from . import DRAWS, TUNE, WHOLE_DRAWS, default_config
from .build import build_model, data_dims, model_data
from .cache import compile_nutpie
from .io import table_hash
from .spec import ModelSpec

__all__ = ["fit", "sample_model", "table_hash", "SAMPLERS", "attach_provenance", "kept_vars", "nuts_settings",
           "TARGET_ACCEPT", "MAXDEPTH", "EIGVAL_CUTOFF", "MASS_MATRIX_WINDOW", "run_nutpie", "start_at_mode", "INIT_JITTER",
           "find_mode", "laplace_whitened", "LAPLACE"]

#: Samplers: ``nutpie`` (default, numba-compiled NUTS), ``pymc`` (PyMC's NUTS
#: on the C backend) and ``numba`` (PyMC's NUTS on the numba backend).
SAMPLERS = ("nutpie", "pymc", "numba")
#: NUTS target acceptance. 0.9: 0.8 left a few divergences on data/cpu_sweep.csv with the
#: configuration-family scale, and a capped tree at 0.8 diverged on the reference table; 0.95 (the default
#: before 2026-12-05) costs ~1.4x the leapfrog steps per draw for no diagnostic gain (docs/speed.md, section 5).
TARGET_ACCEPT = 0.9
#: Largest NUTS tree depth (at most 2**8 = 256 leapfrog steps per draw). With nutpie's default 10, early
#: warm-up, before the low-rank mass matrix has adapted, runs trees of ~1000 steps: 90 % of the reference
#: fit's gradient evaluations went there (docs/speed.md, section 5). Adapted draws need 15-30 steps.
MAXDEPTH = 8
#: nutpie's low-rank mass matrix corrects the directions whose posterior variance differs from the diagonal's
#: by more than this factor (nutpie's ``mass_matrix_eigval_cutoff``: its docstring says 100, its settings hold 2).
#: At 10 (with :data:`MASS_MATRIX_WINDOW`) the harness's split fits ended above R-hat 1.01 in 11 of 123 instead of 33,
#: with the same held-out numbers, at ~1.9x the harness's time (docs/speed.md, sections 15-16); 2 stays for that time.
EIGVAL_CUTOFF = 2.0
#: Warm-up draws between two switches of the window the mass matrix is estimated from (nutpie's
#: ``mass_matrix_switch_freq`` and ``window_switch_freq``, 80 by default). A low-rank estimate of ~500
#: coordinates from 80 draws is mostly noise; from up to 150 it is less so. With 150 the harness's split fits ended
#: above R-hat 1.01 in 33 of 123 instead of 51, in the same time (958 s against 961 s), SBC stayed uniform, and
#: README command 1's and the reference fit's min ESS bulk rose from 553 and 671 to 601 and 701 at the same
#: seed (docs/speed.md, section 16). Shorter windows (20, 30) left a worse mass matrix (section 5).
MASS_MATRIX_WINDOW = 150
#: Half-width of the uniform jitter around the posterior mode that each chain starts from, on the
#: unconstrained scale (:func:`start_at_mode`). PyMC's own start jitters its prior-centre point by 1.0; around the
#: mode, 1.0 sent a harness GPT split to R-hat 1.13 where 0.1 gave 1.007 (docs/speed.md, section 13).
INIT_JITTER = 0.1
#: Sample on coordinates whitened by the Laplace approximation at the mode (:mod:`bayes_energy.models.laplace`).
LAPLACE = False
#: Per-row deterministics left out of saved posteriors (they are recomputed).
DROP_VARS = ("log_eta_curve",)


def nuts_settings(target_accept: float | None = None, eigval_cutoff: float | None = None) -> dict:
    """Keyword arguments of every ``nutpie.sample`` call of the package (fit, refit, SBC, benchmarks).

    The log proxies are strongly collinear inside a cell (ln C, ln M, tokens all follow model size):
    a low-rank-modified mass matrix adapts to that (a diagonal one ran ~1000 leapfrog steps per draw on
    the reference table, R-hat 1.15), re-estimated every :data:`MASS_MATRIX_WINDOW` warm-up draws;
    :data:`MAXDEPTH` caps the trees of early warm-up. ``None`` means the package's :data:`TARGET_ACCEPT` and
    :data:`EIGVAL_CUTOFF`.
    """
    eigval_cutoff = EIGVAL_CUTOFF if eigval_cutoff is None else eigval_cutoff
    if not eigval_cutoff > 1:
        raise ValueError(f"eigval_cutoff must be above 1, got {eigval_cutoff}")
    return {"low_rank_modified_mass_matrix": True, "maxdepth": MAXDEPTH, "mass_matrix_eigval_cutoff": float(eigval_cutoff),
            "mass_matrix_switch_freq": MASS_MATRIX_WINDOW, "window_switch_freq": MASS_MATRIX_WINDOW,
            "target_accept": TARGET_ACCEPT if target_accept is None else target_accept}


def _logp_and_gradient(compiled):
    """``f(x) -> (-log density, -gradient)`` of a nutpie-compiled PyMC model, through its compiled C function."""
    import ctypes

    func, n = compiled.compiled_logp_func.ctypes, compiled.n_dim
    user_data = ctypes.c_void_p(compiled.user_data.ctypes.data)
    double_p = ctypes.POINTER(ctypes.c_double)

    def f(x):
        x = np.ascontiguousarray(x, dtype=np.float64)
        grad, logp = np.empty(n), np.empty(())
        if func(n, x.ctypes.data_as(double_p), grad.ctypes.data_as(double_p), logp.ctypes.data_as(double_p), user_data):
            return np.inf, np.zeros(n)  # outside the support, or not finite
        return -float(logp), -grad
    return f


def find_mode(compiled, seed: int | None = None, maxiter: int = 2000) -> np.ndarray | None:
    """The posterior mode of a nutpie-compiled model on the unconstrained scale, by L-BFGS (scipy) from
    PyMC's initial point through the compiled log density; None when the climb fails (no finite log density
    on its path) or the model was not compiled through numba (nutpie's JAX backend)."""
    from scipy.optimize import minimize

    if not hasattr(compiled, "compiled_logp_func"):
        return None
    start = compiled.initial_point_func(0 if seed is None else seed)
    with np.errstate(all="ignore"):
        res = minimize(_logp_and_gradient(compiled), start, jac=True, method="L-BFGS-B", options={"maxiter": maxiter})
    if not np.isfinite(res.fun) or not np.all(np.isfinite(res.x)):
        return None
    return res.x


def start_at_mode(compiled, seed: int | None = None, jitter: float = INIT_JITTER, maxiter: int = 2000):
    r"""The nutpie-compiled model ``compiled`` with its chains starting near the posterior mode.

    L-BFGS (scipy) climbs the compiled log-density from PyMC's initial point (:func:`find_mode`, about 1 s
    for the reference table); each chain then starts at that point plus a uniform jitter of ``jitter`` on every
    unconstrained coordinate, drawn from the chain's own seed. By default nutpie starts from PyMC's
    prior-centre point jittered by 1.0, and with the heavy-tailed likelihoods an early, unadapted warm-up
    from there can settle in a minor mode: a chain with the energy noise's degrees of freedom near 1 that
    treats a few rows as outliers, 80 log-density units below the other chain (harness GPT splits, R-hat
    up to 2.2; docs/speed.md, section 13). The posterior is unchanged; only the start moves. Starting all
    chains near one mode makes R-hat less able to reveal a second mode of similar mass far away (the BERT
    noise modes of section 9); ``diagnostics.minor_mode_chains`` still compares the chains' log densities.

    When the climb fails, the model is returned unchanged.
    """
    mode = find_mode(compiled, seed, maxiter)
    return compiled if mode is None else _started_near(compiled, mode, jitter)


def _started_near(compiled, mode: np.ndarray, jitter: float = INIT_JITTER):
    """``compiled`` with each chain starting at ``mode`` plus a uniform jitter drawn from the chain's seed."""
    import dataclasses

    def near_mode(chain_seed):
        return mode + np.random.default_rng(chain_seed).uniform(-jitter, jitter, size=mode.shape)

    return dataclasses.replace(compiled, initial_point_func=near_mode)


def laplace_whitened(compiled, seed: int | None = None):
    """``compiled`` sampled on coordinates whitened by the Laplace approximation at the posterior mode
    (:mod:`bayes_energy.models.laplace`), its chains starting near the mode; :func:`start_at_mode`'s model
    when the mode or a finite Hessian cannot be had."""
    from .laplace import hessian, precondition, whitening

    mode = find_mode(compiled, seed)
    if mode is None:
        return compiled
    W = whitening(hessian(_logp_and_gradient(compiled), mode))
    return _started_near(compiled, mode) if W is None else precondition(compiled, mode, W)


def run_nutpie(compiled, draws: int = WHOLE_DRAWS, tune: int = TUNE, chains: int = 4, seed: int | None = None,
               progress: bool = False, target_accept: float | None = None,
               eigval_cutoff: float | None = None, laplace: bool | None = None) -> az.InferenceData:
    """``nutpie.sample`` as every fit of the package runs it: chains from the mode (:func:`start_at_mode`),
    on coordinates whitened at the mode when ``laplace`` (:func:`laplace_whitened`; None: :data:`LAPLACE`),
    :func:`nuts_settings`, a core per chain (up to :func:`bayes_energy.threads`), and the warm-up draws dropped
    (their tree sizes stay)."""
    import nutpie

    laplace = LAPLACE if laplace is None else laplace
    started = laplace_whitened(compiled, seed) if laplace else start_at_mode(compiled, seed)
    idata = nutpie.sample(started, draws=int(draws), tune=int(tune), chains=int(chains),
                          seed=seed, progress_bar=progress, cores=min(int(chains), threads()),
                          **nuts_settings(target_accept, eigval_cutoff))
    # the tuning draws are not posterior draws (PyMC discards them too); their tree sizes
    # (warmup_sample_stats) stay, to show how warm-up went. Dropping them saves ~1 s of each save
    # and load of a fit and 3 MB of README command 1's posterior.nc (docs/speed.md, section 11).
    if "warmup_posterior" in idata.groups():
        del idata["warmup_posterior"]
    return idata


def sample_model(model: pm.Model, sampler: str = "nutpie", draws: int = WHOLE_DRAWS, tune: int = TUNE,
                 chains: int = 4, seed: int | None = None, progress: bool = True,
                 compiled=None, target_accept: float = TARGET_ACCEPT) -> az.InferenceData:
    """Draw from the posterior of a built model.

    Parameters
    ----------
    model : pymc.Model
    sampler : {"nutpie", "pymc", "numba"}
    draws, tune, chains : int
    seed : int, optional
    progress : bool
        Show the sampler's progress bar.
    target_accept : float
        NUTS target acceptance; higher means smaller steps (fewer divergences).
    compiled : nutpie compiled model, optional
        Reuse a compiled model (e.g. ``compiled.with_data(...)``) instead of
        compiling ``model`` again.

    Returns
    -------
    arviz.InferenceData
        Posterior and sample stats (without log-likelihood or predictive).
    """
    if sampler not in SAMPLERS:
        raise ValueError(f"unknown sampler {sampler!r}; choose one of {', '.join(SAMPLERS)}")
    if sampler == "nutpie":
        if compiled is None:
            compiled = compile_nutpie(model, var_names=kept_vars(model))
        return run_nutpie(compiled, draws=draws, tune=tune, chains=chains, seed=seed, progress=progress,
                          target_accept=target_accept)
    kwargs = {"compile_kwargs": {"mode": "NUMBA"}} if sampler == "numba" else {}
    if sampler == "pymc":
        import pytensor

        if not pytensor.config.blas__ldflags:
            warnings.warn("sampler 'pymc' runs PyTensor's C backend, which found no BLAS to link here: "
                          "it will be slower than the default 'nutpie' (results are the same)", RuntimeWarning,
                          stacklevel=2)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        idata = pm.sample(draws=draws, tune=tune, chains=chains, cores=min(chains, threads()), random_seed=seed,
                          progressbar=progress, var_names=kept_vars(model), target_accept=target_accept, **kwargs)
    return idata


def kept_vars(model: pm.Model) -> list[str]:
    """The variables a fit keeps: free variables and deterministics, less the per-run ones (``DROP_VARS``)."""
    return [v.name for v in model.free_RVs + model.deterministics if v.name not in DROP_VARS]


def attach_provenance(idata: az.InferenceData, spec: ModelSpec, df: pd.DataFrame) -> az.InferenceData:
    """Write model name, config, version, table hash and the table itself into ``idata``."""
    attrs = {
        "bayes_energy_model": spec.name,
        "bayes_energy_config": json.dumps(spec.config),
        "bayes_energy_version": __version__,
        "training_table_sha256": table_hash(df),
        "inference_library": "pymc",
        "inference_library_version": pm.__version__,
    }
    for group in idata.groups():
        idata[group].attrs.update({"created_by": f"bayes_energy {__version__}"})
    idata.posterior.attrs.update(attrs)
    table = df.reset_index(drop=True).copy()
    for col in table.columns:
        if table[col].dtype == object or str(table[col].dtype).startswith("string"):
            table[col] = table[col].astype(str)
    ds = xr.Dataset.from_dataframe(table.rename_axis("row"))
    if "training_table" in idata.groups():
        del idata["training_table"]
    idata.add_groups({"training_table": ds})
    return idata


def fit(df: pd.DataFrame, model: str = "hierarchical", config: dict | None = None,
        levels: dict | None = None, sampler: str = "nutpie", draws: int | None = None, tune: int | None = None,
        chains: int = 4, seed: int | None = None, progress: bool = True,
        predictive: bool = True, target_accept: float | None = None) -> az.InferenceData:
    """Fit a Bayesian model to a sweep table.

    Parameters
    ----------
    df : pandas.DataFrame
        A validated sweep table with ``efficiency``
        (:func:`bayes_energy.datasets.load_sweep` gives one).
    model : {"pooled", "hierarchical"}
    config : dict, optional
        Overrides merged into the model's default config.
    levels : dict, optional
        Fixed level lists (see :meth:`ModelSpec.from_table`).
    sampler, chains, seed, progress
        See :func:`sample_model`.
    draws, tune : int, optional
        Per chain; by default :data:`~bayes_energy.models.DRAWS`, :data:`~bayes_energy.models.TUNE` when the
        posterior is sampled in its two parts (nutpie, every run's efficiency measured: :mod:`bayes_energy.models.parts`),
        else :data:`~bayes_energy.models.WHOLE_DRAWS`, :data:`~bayes_energy.models.TUNE`.
    predictive : bool, default True
        Also compute the pointwise log-likelihood and posterior predictive.
    target_accept : float, optional
        NUTS target acceptance (default :data:`TARGET_ACCEPT`; in parts, each part's
        :data:`~bayes_energy.models.parts.PART_SAMPLING`).

    Returns
    -------
    arviz.InferenceData

    Examples
    --------
    >>> from bayes_energy.simulate import simulate_sweep
    >>> idata = fit(simulate_sweep(seed=1), model="pooled", draws=200, tune=200)  # doctest: +SKIP
    """
    from .parts import compile_parts, factorises, run_parts

    spec = ModelSpec.from_table(df, model, default_config(model, config), levels=levels)
    tune = TUNE if tune is None else tune
    if sampler == "nutpie" and factorises(spec, df):
        # every efficiency measured: the curves and the outcomes are independent parts (models.parts)
        idata = run_parts(compile_parts(spec, df), draws=DRAWS if draws is None else draws, tune=tune, chains=chains,
                          seed=seed, progress=progress, target_accept=target_accept)
    else:
        idata = sample_model(build_model(spec, df), sampler=sampler, draws=WHOLE_DRAWS if draws is None else draws,
                             tune=tune, chains=chains, seed=seed, progress=progress,
                             target_accept=TARGET_ACCEPT if target_accept is None else target_accept)
    if predictive:
        add_predictive(idata, spec, df, seed=seed)
    return attach_provenance(idata, spec, df)


def add_predictive(idata: az.InferenceData, spec: ModelSpec, df: pd.DataFrame,
                   seed: int | None = None) -> az.InferenceData:
    """Add log-likelihood, posterior predictive, observed and constant data to a fit of ``spec`` on ``df``.

    The pointwise log-likelihood and the replicates come from the model's numpy half
    (:func:`~bayes_energy.models.predictive.pointwise_log_likelihood`,
    :func:`~bayes_energy.models.predictive.posterior_predictive_draws`), equal to what
    ``pm.compute_log_likelihood`` and ``pm.sample_posterior_predictive`` give on the built model
    (``tests/test_predictive.py``) but without compiling two more PyTensor functions: 19 s of a
    first fit on a new machine, ~3 s of every later one (docs/speed.md, section 6).
    """
    from .io import sample_array
    from .predictive import likelihood_terms, pointwise_log_likelihood, posterior_predictive_draws

    post = idata.posterior
    n_chain, n_draw = post.sizes["chain"], post.sizes["draw"]
    P = {k: sample_array(post[k]) for k in post.data_vars}
    values = model_data(spec, df)
    terms = likelihood_terms(P, spec.arrays(df))
    observed = {"log_energy": values["log_energy_obs"], "log_time": values["log_time_obs"],
                "log_eta": values["log_eta_curve_obs"]}
    dims = {"log_energy": "run", "log_time": "run", "log_eta": "curve_run"}
    coords = {"chain": post["chain"].to_numpy(), "draw": post["draw"].to_numpy(),
              "run": np.arange(len(df)), "curve_run": np.arange(len(values["curve_rows"]))}

    def dataset(arrays: dict) -> xr.Dataset:
        return xr.Dataset({k: (("chain", "draw", dims[k]), a.reshape(n_chain, n_draw, -1)) for k, a in arrays.items()},
                          coords=coords)

    groups = {
        "log_likelihood": dataset(pointwise_log_likelihood(P, terms)),
        "posterior_predictive": dataset(posterior_predictive_draws(P, terms, np.random.default_rng(seed))),
        "observed_data": xr.Dataset({k: (dims[k], v) for k, v in observed.items()},
                                    coords={"run": coords["run"], "curve_run": coords["curve_run"]}),
        "constant_data": xr.Dataset({k: (data_dims(k), v) for k, v in values.items()
                                     if k not in ("log_time_obs", "log_eta_curve_obs")},
                                    coords={**spec.coords, "run": coords["run"], "curve_run": coords["curve_run"]}),
    }
    for group, ds in groups.items():
        ds.attrs.update({"inference_library": "bayes_energy (numpy)", "created_by": f"bayes_energy {__version__}"})
        if group in idata.groups():
            del idata[group]
        idata.add_groups({group: ds})
    return idata
