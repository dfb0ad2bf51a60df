r"""Sample the posterior in its two independent parts: the speedup curves, and energy with time.

When every run's efficiency :math:`\eta` is measured (every multi-device run has its single-device
partner; the reference table, README command 1's data and every harness split), energy and time take
the measured :math:`\ln\eta` as a feature and only the ``log_eta`` likelihood involves the speedup curves.
The two sets of parameters share no prior and no likelihood term, so the posterior is a product,

.. math::

    p(\theta_{curves}, \theta_{outcomes} \mid y) = p(\theta_{curves} \mid \ln\eta)\;
    p(\theta_{outcomes} \mid \ln E, \ln T, \ln\eta),

and sampling each factor on its own and pairing the draws gives draws of the whole posterior: the same
posterior, not an approximation. What changes is the sampler's work. Sampled together, NUTS's one step size
and mass matrix must serve both parts, and the curves' weakly identified directions (a cell's USL
contention pinned by two device counts) slow every coordinate; apart, each part adapts to its own
geometry and is whitened at its own mode (:func:`bayes_energy.models.sample.laplace_whitened`).
On the reference table (``docs/speed.md`` section 20), seed 2026, 4 chains:

* together, 400 + 1500 draws: 52 s of sampling, 31 leapfrog steps per draw, min ESS bulk 701;
* apart, whitened: energy and time 12.3 s (15 steps per draw, min ESS bulk 3621), the curves 6.0 s
  (15 steps per draw, min ESS bulk 950).

The curves' draws autocorrelate over ~6 draws where energy's and time's barely do, and each costs about
half as much, so the curves part runs three times the draws and keeps every third (:data:`PART_SAMPLING`).

A table with a run whose efficiency is unknown couples the parts (its energy uses the curves' efficiency),
and is sampled whole.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import arviz as az
import numpy as np
import pandas as pd
import xarray as xr

from .build import PARTS, build_model, model_data
from .spec import ModelSpec

__all__ = ["PART_SAMPLING", "RETRY_TARGET_ACCEPT", "compile_parts", "factorises", "merge_parts", "run_parts",
           "with_data"]

#: How each part is sampled (docs/speed.md section 20), given a fit's draws and tuning steps per chain:
#:
#: * ``thin``: the part runs this many times the draws and keeps every this-th. The curves: 3. Their draws
#:   autocorrelate over ~6 where energy's and time's barely do, and each costs about half as much.
#: * ``laplace``: on coordinates whitened at the part's mode (:func:`bayes_energy.models.sample.laplace_whitened`).
#:   Energy and time: yes, 12.3 s against 25.3 s on the reference table, min ESS bulk 3621 against 2444. The
#:   curves: no; whitened at the mode, a chain wandered into the 2080 Ti x GPT cell's weakly identified USL
#:   contention and diverged there (848 divergent draws in one of four chains, 4 x 4500 draws), and over six seeds
#:   their min ESS bulk spread wider (445-1474 against 869-1362) for ~1 s less.
#: * ``target_accept``: NUTS's (None: :data:`bayes_energy.models.sample.TARGET_ACCEPT`, 0.9). The curves: 0.93. On
#:   their own they adapt a longer step than the whole model did, and in the harness's GPT splits the pooled model's
#:   curves diverged in the tail of that ridge: 62 divergent draws over the harness at 0.9. On three GPT split fits
#:   of each model: 17 divergent draws at 0.9, 1 at 0.93 or 0.95, 0 at 0.98; the reference fit's curves took 9.2-9.8 s
#:   at 0.93, 12.4-13.6 s at 0.95 (a deeper tree) and 7.9-8.7 s at 0.9.
PART_SAMPLING = {
    "curves": {"thin": 3, "laplace": False, "target_accept": 0.93},
    "outcomes": {"thin": 1, "laplace": True, "target_accept": None},
}
#: A part whose draws diverged is sampled once more at this target acceptance (unless the caller fixed one): NUTS's
#: usual remedy, cheap here because a part is small. In the harness, with the curves at 0.93, 7 of 123 split fits had
#: divergent draws (117; 98 in one fit's curves part, whose chains then disagreed, R-hat 2.14), where the whole model,
#: whose step size the whole posterior set, had 2; with the retry, 1 fit (7 draws) (docs/speed.md section 20).
RETRY_TARGET_ACCEPT = 0.98


def factorises(spec: ModelSpec, df: pd.DataFrame) -> bool:
    """Whether the posterior of ``spec`` on ``df`` is the product of its two parts: every run's efficiency known."""
    return bool(np.all(np.isfinite(spec.arrays(df)["log_eta_obs"])))


def _compile(spec: ModelSpec, df: pd.DataFrame, part: str):
    from .cache import compile_nutpie
    from .sample import kept_vars

    model = build_model(spec, df, part=part)
    return compile_nutpie(model, var_names=kept_vars(model))


def _compile_into_cache(spec: ModelSpec, df: pd.DataFrame, part: str) -> None:
    """A forked child's work: compile ``part`` so that its numba code lands in the machine's cache."""
    code = 1  # on any error: the parent compiles the part again itself
    try:
        _compile(spec, df, part)
        code = 0
    finally:
        os._exit(code)


def _compiled_before(spec: ModelSpec) -> tuple[Path | None, str]:
    """The file listing the models whose parts this machine's compile cache holds, and this model's line in it."""
    from .cache import enable_compile_cache, wrapper_cache_dir

    cfg = {k: v for k, v in spec.config.items() if k not in ("centre", "scale", "levels")}
    sizes = {k: len(v) for k, v in spec.coords.items()}
    key = hashlib.sha256(json.dumps([spec.name, cfg, sizes], sort_keys=True, default=str).encode()).hexdigest()[:20]
    return (Path(wrapper_cache_dir()) / "parts_compiled.txt" if enable_compile_cache() else None), key


def compile_parts(spec: ModelSpec, df: pd.DataFrame) -> dict:
    """The two parts of the model, each built and compiled by nutpie: ``{part: compiled}``.

    The first time this machine compiles a model (its compile cache has no line for it), a forked process
    compiles the curves part into the cache while this one compiles energy and time; the curves then load
    from the cache. Each part's numba compile is single-threaded, so on two cores this takes README command 1's
    cold compile from 98.5 s to 57.9 s (docs/speed.md section 20). Once compiled, both parts load from the cache
    in ~2 s each, and nothing is forked. Only where the cache is on and processes fork (Linux).
    """
    listing, key = _compiled_before(spec)
    known = listing is not None and listing.exists() and key in listing.read_text().split()
    child = None
    if listing is not None and not known and sys.platform == "linux":
        child = mp.get_context("fork").Process(target=_compile_into_cache, args=(spec, df, PARTS[0]), daemon=True)
        child.start()
    out = {PARTS[1]: _compile(spec, df, PARTS[1])}
    if child is not None:
        child.join()
    out[PARTS[0]] = _compile(spec, df, PARTS[0])  # from the cache the child filled (or compiled here if it failed)
    if listing is not None and not known:
        listing.parent.mkdir(parents=True, exist_ok=True)
        with open(listing, "a") as fh:
            fh.write(key + "\n")
    return {part: out[part] for part in PARTS}


def with_data(compiled: dict, spec: ModelSpec, df: pd.DataFrame) -> dict:
    """Each compiled part with ``df``'s arrays swapped in (the ``pm.Data`` its graph uses), no new compile."""
    values = model_data(spec, df)
    return {part: c.with_data(**{k: v for k, v in values.items() if k in c.shared_data}) for part, c in compiled.items()}


def run_parts(compiled: dict, draws: int, tune: int, chains: int, seed: int | None = None, progress: bool = False,
              target_accept: float | None = None, eigval_cutoff: float | None = None,
              laplace: bool | None = None) -> az.InferenceData:
    """Sample each compiled part (:func:`bayes_energy.models.sample.run_nutpie`) as :data:`PART_SAMPLING` says, with
    its own seed, and merge the draws (:func:`merge_parts`). ``target_accept`` and ``laplace``, when given, hold for
    both parts. A part whose draws diverged is sampled once more at :data:`RETRY_TARGET_ACCEPT` (not when
    ``target_accept`` is given); ``posterior.attrs["sampled_in_parts"]`` says so, and the seconds each part took."""
    from .sample import run_nutpie

    seeds = [None] * len(PARTS) if seed is None else np.random.SeedSequence(seed).generate_state(len(PARTS)).tolist()
    out, notes = {}, []
    for part, part_seed in zip(PARTS, seeds):
        how = PART_SAMPLING[part]
        t0 = time.perf_counter()
        kw = {"draws": int(draws) * how["thin"], "tune": tune, "chains": chains, "seed": part_seed, "progress": progress,
              "eigval_cutoff": eigval_cutoff, "laplace": how["laplace"] if laplace is None else laplace}
        out[part] = run_nutpie(compiled[part], target_accept=how["target_accept"] if target_accept is None else target_accept,
                               **kw)
        note = f"{part} ("
        divergent = int(out[part].sample_stats["diverging"].sum())
        if divergent and target_accept is None:
            out[part] = run_nutpie(compiled[part], target_accept=RETRY_TARGET_ACCEPT, **kw)
            note += f"{divergent} divergent draws, sampled again at target acceptance {RETRY_TARGET_ACCEPT:g}; "
        notes.append(note + f"{time.perf_counter() - t0:.1f} s)")
    idata = merge_parts(out, {p: PART_SAMPLING[p]["thin"] for p in PARTS})
    idata.posterior.attrs["sampled_in_parts"] = ", ".join(notes)
    return idata


def _thinned(ds: xr.Dataset, thin: int, stats: bool) -> xr.Dataset:
    """Every ``thin``-th draw (the last of each block of ``thin``); for sampler statistics, a kept draw's leapfrog
    steps and divergences count those of the draws thinned away before it (the work and the trouble they stand for)."""
    if thin == 1:
        return ds
    n = ds.sizes["draw"] // thin
    kept = ds.isel(draw=slice(thin - 1, n * thin, thin)).assign_coords(draw=np.arange(n))
    if stats:
        def blocks(v):
            return ds[v].values[:, : n * thin].reshape(ds.sizes["chain"], n, thin, *ds[v].shape[2:])

        if "n_steps" in ds:
            kept["n_steps"] = (kept["n_steps"].dims, blocks("n_steps").sum(axis=2).astype(ds["n_steps"].dtype))
        if "diverging" in ds:
            kept["diverging"] = (kept["diverging"].dims, blocks("diverging").any(axis=2))
    return kept


def merge_parts(parts: dict[str, az.InferenceData], thin: dict[str, int] | None = None) -> az.InferenceData:
    """One ``InferenceData`` from the parts' fits: the posteriors side by side (draw i of each part paired),
    the sampler statistics joined along a ``part`` dimension, except ``diverging`` (either part; each part's in
    ``diverging_part``), ``n_steps`` (leapfrog steps of both) and ``logp`` (the sum: the whole posterior's log
    density)."""
    thin = thin or {}
    names = list(parts)

    def stats(group):
        per = [_thinned(parts[p][group], thin.get(p, 1) if group == "sample_stats" else 1, True) for p in names]
        joined = xr.concat(per, dim=pd.Index(names, name="part"), coords="minimal", compat="override",
                           join="inner")
        whole = {"diverging": joined["diverging"].any("part"), "n_steps": joined["n_steps"].sum("part"),
                 "logp": joined["logp"].sum("part"), "diverging_part": joined["diverging"]}
        return joined.assign(whole).transpose("chain", "draw", ...)

    posterior = xr.merge([_thinned(parts[p].posterior, thin.get(p, 1), False) for p in names], join="inner",
                         compat="override", combine_attrs="drop_conflicts")
    groups = {"posterior": posterior, "sample_stats": stats("sample_stats")}
    if all("warmup_sample_stats" in parts[p].groups() for p in names):
        groups["warmup_sample_stats"] = stats("warmup_sample_stats")
    return az.InferenceData(**groups)
