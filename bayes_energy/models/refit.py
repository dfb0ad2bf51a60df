"""Compile a model once, refit it on many tables.

nutpie compiles a PyMC model to numba in 10-40 s; sampling a few hundred
draws of it then takes a second or two. Every input of the model, the
observations too, is ``pm.Data`` (:mod:`bayes_energy.models.build`), so one
compiled model serves every table whose hardware, family, strategy (and
configuration-family, where the config uses them) levels are among those it
was compiled with: ``compiled.with_data(...)`` swaps the arrays in, with no
new compile. That is how design loops (:mod:`bayes_energy.design`),
cross-validation folds and simulation studies refit cheaply::

    from bayes_energy.models.refit import compile_model, refit

    compiled = compile_model("hierarchical", full_table)     # once: fixes the levels
    idata = refit(compiled, some_rows, seed=1, draws=300, tune=300, chains=2)

The compile table fixes the level lists only: cells, strategies or families
absent from a refit table are prior-only parameters there (the between-cell
scales are fixed constants of the config, so they leave the other cells'
posterior unchanged). Centring constants are taken from each refit table, as
:func:`bayes_energy.models.sample.fit` does, and saved with its posterior.

The returned posterior carries the same provenance attributes and
``training_table`` group as :func:`~bayes_energy.models.sample.fit` writes,
so :func:`bayes_energy.predict.predict`, :func:`bayes_energy.models.io.save`
and :func:`~bayes_energy.models.io.load` take it as they take a fit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import arviz as az
import pandas as pd

from . import DRAWS, TUNE, WHOLE_DRAWS, default_config
from .cache import compile_nutpie
from .spec import ModelSpec, cell_labels, group_keys

__all__ = ["CompiledModel", "compile_model", "refit"]


@dataclass
class CompiledModel:
    """A nutpie-compiled model and what it was compiled for.

    Attributes
    ----------
    name : str
        Model name (``pooled`` or ``hierarchical``).
    config : dict
        The merged model config (without levels and centring constants).
    levels : dict
        The level lists the compiled graph is sized for.
    compiled : object
        nutpie's compiled model, or ``{part: compiled}`` when compiled in parts (:mod:`~bayes_energy.models.parts`).
    compile_s : float
        Wall seconds the build and compile took.
    """

    name: str
    config: dict
    levels: dict
    compiled: object
    compile_s: float

    def __repr__(self) -> str:
        cells = ", ".join(self.levels["cell"])
        return f"CompiledModel({self.name!r}, cells: {cells}; compiled in {self.compile_s:.1f} s)"


def compile_model(spec_or_name: ModelSpec | str, df: pd.DataFrame, config: dict | None = None) -> CompiledModel:
    """Build and compile a model once, sized by the levels of ``df``.

    Parameters
    ----------
    spec_or_name : ModelSpec or str
        A model name (``"hierarchical"``, ``"pooled"``), or a spec whose name,
        config and level lists are used (e.g. ``load_spec(idata)`` of a fit).
    df : pandas.DataFrame
        The "full" table: every level a later refit table may hold must be
        in it (e.g. the whole reference table when refitting on its subsets).
    config : dict, optional
        Overrides merged into the model's default config (name given only).

    Returns
    -------
    CompiledModel
    """
    from .build import build_model
    from .parts import compile_parts, factorises
    from .sample import kept_vars

    t0 = time.perf_counter()
    if isinstance(spec_or_name, ModelSpec):
        if config is not None:
            raise ValueError("give config overrides with a model name, not with a spec (its config is used)")
        name = spec_or_name.name
        cfg = {k: v for k, v in spec_or_name.config.items() if k not in ("levels", "centre", "scale")}
        levels = spec_or_name.config.get("levels")
    else:
        name = str(spec_or_name)
        cfg = default_config(name, config)  # ValueError on an unknown model
        levels = None
    spec = ModelSpec.from_table(df, name, cfg, levels=levels)
    if factorises(spec, df):
        compiled = compile_parts(spec, df)  # every efficiency measured: two independent parts (models.parts)
    else:
        model = build_model(spec, df)
        compiled = compile_nutpie(model, var_names=kept_vars(model))
    return CompiledModel(name=name, config=cfg, levels=spec.config["levels"], compiled=compiled,
                         compile_s=time.perf_counter() - t0)


def _check_levels(compiled: CompiledModel, df: pd.DataFrame) -> None:
    checks = [("hardware", df["hardware"].astype(str)), ("family", df["family"].astype(str)),
              ("cell", cell_labels(df)), ("strategy", df["strategy"].astype(str))]
    if compiled.config.get("group_effects"):
        checks.append(("group", group_keys(df)))
    for dim, values in checks:
        known = list(compiled.levels[dim])
        new = sorted(set(values) - set(known))
        if new:
            raise ValueError(f"refit table: {dim} level(s) {', '.join(new)} were not in the table the model was "
                             f"compiled for ({', '.join(known)}); compile on a table that holds them")


def refit(compiled: CompiledModel, df: pd.DataFrame, seed: int | None = None, draws: int | None = None,
          tune: int | None = None, chains: int = 4, progress: bool = False, target_accept: float | None = None,
          eigval_cutoff: float | None = None, laplace: bool | None = None) -> az.InferenceData:
    """Sample the compiled model on a new table, with no new compile.

    Parameters
    ----------
    compiled : CompiledModel
        From :func:`compile_model`.
    df : pandas.DataFrame
        A validated sweep table (with ``efficiency``) whose levels are among
        ``compiled.levels``.
    seed : int, optional
    draws, tune : int, optional
        Per chain; by default :data:`~bayes_energy.models.DRAWS` and :data:`~bayes_energy.models.TUNE` for a model
        compiled in parts, else :data:`~bayes_energy.models.WHOLE_DRAWS` and :data:`~bayes_energy.models.TUNE`.
    chains : int
    progress : bool
        Show nutpie's progress bar.
    target_accept : float, optional
        NUTS target acceptance (default that of
        :data:`bayes_energy.models.sample.TARGET_ACCEPT`).
    eigval_cutoff : float, optional
        nutpie's low-rank eigenvalue cutoff (default
        :data:`bayes_energy.models.sample.EIGVAL_CUTOFF`).
    laplace : bool, optional
        Sample on coordinates whitened at the mode (default
        :data:`bayes_energy.models.parts.PART_SAMPLING` for a model compiled in parts, else
        :data:`bayes_energy.models.sample.LAPLACE`; :mod:`bayes_energy.models.laplace`).

    Returns
    -------
    arviz.InferenceData
        ``posterior`` and ``sample_stats`` with provenance and the
        ``training_table`` group (no log-likelihood or predictive groups:
        :func:`bayes_energy.models.sample.add_predictive` adds them from the spec and the table).

    Raises
    ------
    ValueError
        When the table is empty or holds a level the model was not compiled for.
    """
    from .build import model_data
    from .parts import factorises, run_parts
    from .parts import with_data as parts_with_data
    from .sample import attach_provenance, run_nutpie

    if not isinstance(compiled, CompiledModel):
        raise TypeError(f"refit needs the CompiledModel that compile_model returns, got {type(compiled).__name__}")
    if len(df) == 0:
        raise ValueError("refit table: no rows")
    in_parts = isinstance(compiled.compiled, dict)  # compiled in parts (models.parts)
    draws = (DRAWS if in_parts else WHOLE_DRAWS) if draws is None else draws
    tune = TUNE if tune is None else tune
    for name, v in (("draws", draws), ("tune", tune), ("chains", chains)):
        if int(v) < 1:
            raise ValueError(f"{name} must be at least 1, got {v}")
    _check_levels(compiled, df)
    spec = ModelSpec.from_table(df, compiled.name, compiled.config, levels=compiled.levels)
    kw = {"draws": draws, "tune": tune, "chains": chains, "seed": seed, "progress": progress,
          "target_accept": target_accept, "eigval_cutoff": eigval_cutoff, "laplace": laplace}
    if in_parts:
        if not factorises(spec, df):
            raise ValueError("refit table: a run's efficiency is unknown (no single-device partner), so the speedup "
                             "curves and the energy are not independent; compile_model on a table like it")
        idata = run_parts(parts_with_data(compiled.compiled, spec, df), **kw)
    else:
        # only the pm.Data the compiled graph uses are its shared variables
        data = {k: v for k, v in model_data(spec, df).items() if k in compiled.compiled.shared_data}
        idata = run_nutpie(compiled.compiled.with_data(**data), **kw)
    idata = attach_provenance(idata, spec, df)
    idata.posterior.attrs["sampler"] = "nutpie (compiled once, refitted with with_data)"
    return idata
