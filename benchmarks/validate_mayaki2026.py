"""Grouped cross-validation on the Mayaki (2026) measurements, the authors' protocol.

Protocol (``../shared/datasets/mayaki2026/README.md``): settings ``bert``
(BERT rows, single/FSDP/TP), ``gpt`` (GPT rows, single/FSDP) and ``pooled``
(both families, single/FSDP); 20 grouped 70/30 splits by configuration family
(``group``) drawn with ``GroupShuffleSplit(random_state=seed)``, keeping only
splits whose test strategy and family levels all occur in training; metrics
on the held-out rows in ln kWh (ln J differs by a constant, so R², RMSE,
slopes, widths and log densities are the same).

Models, all on identical splits:

* ``ols_post`` / ``ols_pre``: the paper's law by least squares
  (:func:`bayes_energy.models.ols.fit_ols`), with measured or nested-regression
  efficiency; 50/80/95 % split-conformal intervals (absolute residuals of a fit
  on 80 % of the training groups, calibrated on the other 20 %).
* ``gb_pre`` / ``gb_post``: scikit-learn's histogram gradient boosting on
  configuration features (``gb_post`` adds ln η); the same conformal intervals.
* ``pooled_*`` / ``hierarchical_*``: the Bayesian models, compiled once each
  (nutpie) on level lists of the whole table and refitted on each split with
  ``compiled.with_data``; ``post`` plugs in the measured efficiency, ``pre``
  draws it from the posterior speedup curves. Intervals are central
  posterior-predictive intervals, ``mlpd`` the mean log predictive density.

The extra setting ``new_hw`` leaves one hardware type out (train on the other,
test on it; single/FSDP rows, families seen in training), one "split" per type.
``new_cell`` leaves out one hardware x family cell whose hardware and family
both occur in other cells (on this table: the RTX 2080 Ti x GPT cell, trained
on A100 x GPT and 2080 Ti x BERT): the case crossed pooling is for.
``--models hierarchical_crossed`` adds the hierarchical model with crossed
pooling, for comparison.

Metrics per split: ``r2``, ``rmse``, ``slope`` (of observed on predicted),
``cov50``/``cov80``/``cov90``/``cov95``, ``hw90``/``hw95`` (multiplicative half-width of the 90 / 95 %
interval: e^q for conformal, median over rows of exp((q97.5 - q2.5)/2) for
the posterior predictive), ``mlpd``, ``divergences``, ``max_rhat``; and for the run time (ln s), which
the package predicts beside the energy, ``t_r2``, ``t_rmse``, ``t_cov90`` and ``t_hw90`` (the Bayesian
models' predictive draws; gradient boosting on ln s with the same features and conformal intervals; the
paper's least squares law is for energy only). The table holds their median and interquartile range over
splits; ``<stem>_coverage.png`` draws the energy's coverage against the nominal level (:func:`plot_coverage`).

A run that dies half-way loses at most the split in flight: after each split the rows so far go to
``<stem>_splits.partial.csv`` (with the run's arguments in ``<stem>_splits.partial.json``), and re-running the
same command goes on from there, as a re-run sweep does (``bayes_energy.runner.sweep``). Other arguments
under the same file names are refused; ``--fresh`` starts over. The finished tables replace the partial files.

Command (the README's headline rows)::

    .venv/bin/python benchmarks/validate_mayaki2026.py            # seed 2026, all splits
    .venv/bin/python benchmarks/validate_mayaki2026.py --quick    # 2 splits, fewer draws
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _tables import RESULTS, markdown  # noqa: E402

from bayes_energy.datasets import load_mayaki2026  # noqa: E402
from bayes_energy.models.ols import fit_ols  # noqa: E402
from bayes_energy.models.sample import nuts_settings  # noqa: E402
from bayes_energy.models.spec import design_frame  # noqa: E402

SETTINGS = ("bert", "gpt", "pooled")
LEVELS = (0.5, 0.8, 0.9, 0.95)
#: Bayesian variants: label -> (model, config overrides). ``hierarchical_crossed`` is the
#: hierarchical model with crossed pooling (hardware + family + interaction effects per
#: cell); run it with ``--models hierarchical_crossed``. ``hierarchical_shared_curves`` shares
#: the speedup curves' covariate slopes across cells (the model before curve_slopes_by_cell);
#: ``hierarchical_wide_curves`` lets them vary twice as much between cells (tau_curve_beta 0.5).
#: ``*_given_energy`` sample time's coefficients on the coordinates "given energy" (config
#: ``time_coordinates``; the same posterior, other sampler geometry: docs/speed.md, section 9).
#: ``hierarchical_no_strategy_slopes`` is the default before 2026-12-06 (no slopes per strategy; the
#: earlier variant ``hierarchical_strategy_slopes`` in the results files is today's default).
#: ``hierarchical_rotate`` samples the cells' coefficients on the rotated basis of their designs (config
#: ``cell_basis``; the same posterior, other geometry: docs/speed.md, section 12), the default since 2026-12-07;
#: ``hierarchical_coef`` samples them directly, the default before. ``hierarchical_whiten`` in the ``--tag whiten``
#: results is a whitening since removed.
BAYES_VARIANTS = {"pooled": ("pooled", {}), "hierarchical": ("hierarchical", {}),
                  "hierarchical_crossed": ("hierarchical", {"crossed": True}),
                  "hierarchical_shared_curves": ("hierarchical", {"curve_slopes_by_cell": False}),
                  "hierarchical_wide_curves": ("hierarchical", {"priors": {"tau_curve_beta": 0.5}}),
                  "hierarchical_curves_all": ("hierarchical", {"curve_covariates_on": ["usl_sigma", "usl_omega",
                                                                                       "tp_gain", "tp_rate"]}),
                  "hierarchical_population_hw": ("hierarchical", {"spec_placement": False}),
                  "hierarchical_first_order": ("hierarchical", {"second_order": False}),
                  "hierarchical_eta_normal": ("hierarchical", {"eta_noise": "normal"}),
                  "hierarchical_eta_t": ("hierarchical", {"eta_noise": "student_t"}),
                  "hierarchical_given_energy": ("hierarchical", {"time_coordinates": "given_energy"}),
                  "pooled_given_energy": ("pooled", {"time_coordinates": "given_energy"}),
                  "hierarchical_no_strategy_slopes": ("hierarchical", {"strategy_slopes": []}),
                  "hierarchical_rotate": ("hierarchical", {"cell_basis": "rotated"}),
                  "hierarchical_coef": ("hierarchical", {"cell_basis": "coef"})}
#: Variants that differ from the default only for hardware x family cells without training rows: run on
#: the extra settings only.
EXTRA_ONLY = ("hierarchical_population_hw",)
BAYES_MODELS = ("pooled", "hierarchical")
#: Extra settings: a hardware type left out; a hardware x family cell left out.
EXTRA_SETTINGS = ("new_hw", "new_cell")
#: The run time's metrics, reported as ``t_<name>`` beside the energy's.
TIME_METRICS = ("r2", "rmse", "cov90", "hw90")
METRICS = ("r2", "rmse", "slope", "cov50", "cov80", "cov90", "hw90", "cov95", "hw95", "mlpd", "eta_rmse",
           *(f"t_{k}" for k in TIME_METRICS), "divergences", "max_rhat")
GB_FEATURES = ("log_compute", "log_memory", "log_params", "log_tokens", "log_seq_len", "log_batch", "log_n_gpus")


# ---------------------------------------------------------------- data and splits
def setting_table(df: pd.DataFrame, setting: str) -> pd.DataFrame:
    """Rows of one protocol setting."""
    if setting == "bert":
        out = df[df["family"] == "bert"]
    elif setting == "gpt":
        out = df[(df["family"] == "gpt") & (df["strategy"] != "tp")]
    elif setting in ("pooled", "new_hw", "new_cell"):
        out = df[df["strategy"] != "tp"]
    else:
        raise ValueError(f"unknown setting {setting!r}")
    return out.reset_index(drop=True)


def _levels_ok(train: pd.DataFrame, test: pd.DataFrame, cols=("strategy", "family", "hardware")) -> bool:
    return all(set(test[c]) <= set(train[c]) for c in cols)


def grouped_splits(df: pd.DataFrame, n_splits: int, seed: int, test_size: float = 0.3) -> list[tuple[np.ndarray, np.ndarray]]:
    """The first ``n_splits`` valid grouped splits of ``GroupShuffleSplit(random_state=seed)``.

    A split is valid when every strategy, family and hardware level of its test
    part also occurs in its training part. Drawing stops at 10 x ``n_splits``.
    """
    from sklearn.model_selection import GroupShuffleSplit

    gss = GroupShuffleSplit(n_splits=10 * n_splits, test_size=test_size, random_state=seed)
    out = []
    for tr, te in gss.split(df, groups=df["group"]):
        if _levels_ok(df.iloc[tr], df.iloc[te]):
            out.append((tr, te))
            if len(out) == n_splits:
                break
    return out


def inner_split(table: pd.DataFrame, train_rows: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A grouped 70/30 split *inside* an outer training part (rows of ``table``).

    Model choices are made on these inner splits (``--inner``), never on an
    outer split's test part.
    """
    train = table.iloc[train_rows].reset_index(drop=True)
    tr, te = grouped_splits(train, 1, seed)[0]
    return train_rows[tr], train_rows[te]


def calibration_split(train: pd.DataFrame, test: pd.DataFrame, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """80/20 split of the training groups (proper training, calibration), levels checked."""
    from sklearn.model_selection import GroupShuffleSplit

    gss = GroupShuffleSplit(n_splits=50, test_size=0.2, random_state=seed)
    for pr, ca in gss.split(train, groups=train["group"]):
        if _levels_ok(train.iloc[pr], train.iloc[ca]) and _levels_ok(train.iloc[pr], test, ("strategy", "family")):
            return pr, ca
    raise RuntimeError("no calibration split keeps every level in the proper training part")


# ---------------------------------------------------------------- metrics
def point_metrics(y: np.ndarray, pred: np.ndarray) -> dict:
    """R², RMSE and the calibration slope (OLS slope of y on the prediction)."""
    resid = y - pred
    sst = np.sum((y - y.mean()) ** 2)
    ok = np.isfinite(pred)
    var = np.var(pred[ok]) if ok.sum() > 1 else 0.0
    slope = np.cov(pred[ok], y[ok], bias=True)[0, 1] / var if var > 0 else np.nan
    return {"r2": 1 - np.sum(resid**2) / sst, "rmse": float(np.sqrt(np.mean(resid**2))), "slope": float(slope)}


def conformal_q(resid_cal: np.ndarray, level: float) -> float:
    """Split-conformal quantile of absolute calibration residuals."""
    n = len(resid_cal)
    k = min(math.ceil((n + 1) * level), n)
    return float(np.sort(np.abs(resid_cal))[k - 1])


def conformal_metrics(y: np.ndarray, centre: np.ndarray, resid_cal: np.ndarray) -> dict:
    out = {}
    for lv in LEVELS:
        q = conformal_q(resid_cal, lv)
        out[f"cov{round(lv * 100)}"] = float(np.mean(np.abs(y - centre) <= q))
        if lv in (0.9, 0.95):
            out[f"hw{round(lv * 100)}"] = float(np.exp(q))
    return out


def draw_metrics(y: np.ndarray, draws: np.ndarray) -> dict:
    """Coverage of central intervals and the 95 % multiplicative half-width from predictive draws."""
    out = {}
    for lv in LEVELS:
        lo, hi = np.quantile(draws, [(1 - lv) / 2, (1 + lv) / 2], axis=0)
        out[f"cov{round(lv * 100)}"] = float(np.mean((y >= lo) & (y <= hi)))
        if lv in (0.9, 0.95):
            out[f"hw{round(lv * 100)}"] = float(np.median(np.exp((hi - lo) / 2)))
    return out


# ---------------------------------------------------------------- point models
def _ols_predict(train, test, post_run):
    return fit_ols(train).predict(test, post_run=post_run)


def _gb_features(df: pd.DataFrame, post_run: bool) -> np.ndarray:
    x = design_frame(df)
    cols = [x[f].to_numpy() for f in GB_FEATURES]
    cols += [df["strategy"].map({"single": 0, "ddp": 1, "fsdp": 2, "tp": 3}).to_numpy(float),
             (df["family"] == "gpt").to_numpy(float), df["hardware"].astype("category").cat.codes.to_numpy(float),
             df["num_layers"].to_numpy(float), df["hidden_size"].to_numpy(float)]
    if post_run:
        cols.append(x["log_eta"].to_numpy())
    return np.column_stack(cols)


def _gb_predict(train, test, post_run, seed=0, target="energy_j"):
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    # hardware codes must agree between train and test
    hw = sorted(set(train["hardware"]) | set(test["hardware"]))
    tr, te = train.copy(), test.copy()
    for d in (tr, te):
        d["hardware"] = pd.Categorical(d["hardware"], categories=hw)
    gb = HistGradientBoostingRegressor(max_iter=400, learning_rate=0.05, random_state=seed,
                                       categorical_features=[7, 8, 9])
    # one OpenMP thread: on 2 busy cores the threaded trees were ~300x slower (spin-waiting)
    with threadpool_limits(1, user_api="openmp"):
        gb.fit(_gb_features(tr, post_run), np.log(train[target].to_numpy(float)))
        return gb.predict(_gb_features(te, post_run))


#: name -> {target: predict(train, test)}: ln of the target on the test rows.
POINT_MODELS = {
    "ols_post": {"energy_j": lambda tr, te: _ols_predict(tr, te, True)},
    "ols_pre": {"energy_j": lambda tr, te: _ols_predict(tr, te, False)},
    "gb_pre": {t: (lambda tr, te, t=t: _gb_predict(tr, te, False, target=t)) for t in ("energy_j", "time_s")},
    "gb_post": {t: (lambda tr, te, t=t: _gb_predict(tr, te, True, target=t)) for t in ("energy_j", "time_s")},
}


def evaluate_point(name: str, train: pd.DataFrame, test: pd.DataFrame, seed: int) -> dict:
    """Point metrics from a fit on all training rows; conformal intervals from the 80/20 split."""
    pr, ca = calibration_split(train, test, seed)
    proper, cal = train.iloc[pr].reset_index(drop=True), train.iloc[ca].reset_index(drop=True)
    both = pd.concat([cal, test], ignore_index=True)
    out = {}
    for target, fn in POINT_MODELS[name].items():
        y = np.log(test[target].to_numpy(float))
        m = point_metrics(y, fn(train, test))
        pred = fn(proper, both)
        resid_cal = np.log(cal[target].to_numpy(float)) - pred[: len(cal)]
        m.update(conformal_metrics(y, pred[len(cal):], resid_cal))
        out.update(m if target == "energy_j" else time_columns(m))
    return out


def time_columns(metrics: dict) -> dict:
    """The run time's columns (``t_<name>``) from its metrics."""
    return {f"t_{k}": metrics[k] for k in TIME_METRICS}


# ---------------------------------------------------------------- Bayesian models
class BayesRunner:
    """One compiled nutpie model per Bayesian model, refitted on any table with ``with_data``.

    The model is built on the level lists of the whole table, so cells,
    strategies and configuration families absent from a training table are
    prior-only parameters: with the between-cell scales fixed they leave the
    posterior of the others unchanged.
    """

    def __init__(self, name: str, full: pd.DataFrame, draws: int, tune: int, chains: int, **sampling):
        """``sampling``: further keywords of :func:`bayes_energy.models.refit.refit` (``eigval_cutoff``,
        ``laplace``, ``target_accept``) for every fit."""
        from bayes_energy.models.refit import compile_model

        self.name = name
        self.sampling = {"draws": draws, "tune": tune, "chains": chains, **sampling}
        model, overrides = BAYES_VARIANTS[name]
        self.compiled = compile_model(model, full, overrides)
        self.compile_s = self.compiled.compile_s

    def fit(self, train: pd.DataFrame, seed: int):
        from bayes_energy.models.refit import refit

        return refit(self.compiled, train, seed=seed, **self.sampling)


def _parts_note(target_accept, laplace) -> str:
    """How a fit in parts overrides the settings above (``bayes_energy.models.parts.PART_SAMPLING``), for the header."""
    from bayes_energy.models.parts import PART_SAMPLING, RETRY_TARGET_ACCEPT

    def one(part, how):
        ta = target_accept if target_accept is not None else how["target_accept"]
        lap = how["laplace"] if laplace is None else laplace
        return (f"{part}: {how['thin']} x the draws, 1 in {how['thin']} kept, " if how["thin"] > 1 else f"{part}: ") + (
            (f"target acceptance {ta:g}, " if ta is not None else "") + ("whitened at the mode" if lap else "not whitened"))

    retry = f"; a part that diverged sampled again at {RETRY_TARGET_ACCEPT:g}" if target_accept is None else ""
    return "in parts (" + "; ".join(one(p, h) for p, h in PART_SAMPLING.items()) + retry + ")"


def fit_diagnostics(idata) -> dict:
    """Divergences, max R-hat and the number of chains stuck in a minor mode (``diagnostics.minor_mode_chains``)."""
    from bayes_energy.models.diagnostics import max_rhat, minor_mode_chains

    modes = minor_mode_chains(idata)
    return {"divergences": int(idata.sample_stats["diverging"].sum()), "max_rhat": max_rhat(idata.posterior),
            "minor_mode_chains": len(modes["minor"]) if modes else np.nan}


def energy_loc_scale(idata, configs: pd.DataFrame, mode: str, seed: int):
    """Per-draw Student-t location, scale and degrees of freedom of ln energy (J).

    The same law as :func:`bayes_energy.predict.predict_draws` (in float64,
    from the same design arrays and posterior draws) up to the energy noise,
    so the predictive density can be evaluated exactly as a mixture over draws
    (``pre`` keeps the speedup-curve scatter as one draw per posterior draw).
    """
    from bayes_energy.models.predictive import energy_loc_scale as loc_scale
    from bayes_energy.models.predictive import log_eta_draws, rng_noise
    from bayes_energy.predict import NewLevelWarning, design_and_posterior

    rng = np.random.default_rng(seed)
    eff = configs["efficiency"].to_numpy(float) if mode == "post" else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NewLevelWarning)
        spec, A, P = design_and_posterior(idata, configs, None, rng)
    log_eta = log_eta_draws(P, A, rng_noise(P, rng) if eff is None else None, eff)
    return loc_scale(P, A, log_eta, spec.config["centre"])


def eta_rmse(test: pd.DataFrame, log_eta_pred: np.ndarray) -> float:
    """RMSE of the predicted ln efficiency on the multi-device rows with a measured efficiency."""
    obs = np.log(test["efficiency"].to_numpy(float))
    ok = (test["n_gpus"].to_numpy() > 1) & np.isfinite(obs)
    return float(np.sqrt(np.mean((log_eta_pred[ok] - obs[ok]) ** 2))) if ok.any() else np.nan


def mlpd(y: np.ndarray, mu: np.ndarray, sigma: np.ndarray, nu: np.ndarray) -> float:
    """Mean over rows of log mean over draws of the Student-t density at ``y``."""
    from scipy.special import logsumexp
    from scipy.stats import t as student_t

    lp = student_t.logpdf(y[None, :], df=nu[:, None], loc=mu, scale=sigma)
    return float(np.mean(logsumexp(lp, axis=0) - np.log(lp.shape[0])))


def evaluate_bayes(runner: BayesRunner, train: pd.DataFrame, test: pd.DataFrame, seed: int) -> dict[str, dict]:
    """Fit once; metrics for the post-run and pre-run predictions."""
    from bayes_energy.predict import NewLevelWarning, predict_draws

    idata = runner.fit(train, seed)
    diag = fit_diagnostics(idata)
    y = np.log(test["energy_j"].to_numpy(float))
    y_time = np.log(test["time_s"].to_numpy(float))
    out = {}
    for mode in ("post", "pre"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NewLevelWarning)
            pred = predict_draws(idata, test, mode=mode, seed=seed)
            draws, eta_draws = pred["log_energy_j"], pred["log_eta"]
        m = point_metrics(y, draws.mean(axis=0))
        m.update(draw_metrics(y, draws))
        t = pred["log_time_s"]
        m.update(time_columns(point_metrics(y_time, t.mean(axis=0)) | draw_metrics(y_time, t)))
        m["mlpd"] = mlpd(y, *energy_loc_scale(idata, test, mode, seed))
        if mode == "pre":
            # held-out ln efficiency of multi-device rows: what the speedup-curve sub-model gets right
            m["eta_rmse"] = eta_rmse(test, eta_draws.mean(axis=0))
        m.update(diag)
        out[f"{runner.name}_{mode}"] = m
    return out


# ---------------------------------------------------------------- the run
def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """Median and interquartile range of every metric per (setting, model)."""
    recs = []
    for (setting, model), g in rows.groupby(["setting", "model"], sort=False):
        rec = {"setting": setting, "model": model, "n_splits": len(g)}
        for m in METRICS:
            v = g[m].astype(float)
            if v.notna().any():
                rec[m] = v.median()
                rec[f"{m}_q25"], rec[f"{m}_q75"] = v.quantile(0.25), v.quantile(0.75)
            else:
                rec[m] = rec[f"{m}_q25"] = rec[f"{m}_q75"] = np.nan
        recs.append(rec)
    return pd.DataFrame(recs)


def markdown_table(summary: pd.DataFrame) -> str:
    """Compact Markdown: median [IQR] per metric."""
    def cell(r, m, d):
        if not np.isfinite(r[m]):
            return ""
        if m == "divergences":
            return f"{r[m]:.0f} [{r[m + '_q25']:.0f}, {r[m + '_q75']:.0f}]"
        return f"{r[m]:.{d}f} [{r[m + '_q25']:.{d}f}, {r[m + '_q75']:.{d}f}]"

    digits = {"r2": 3, "rmse": 3, "slope": 2, "cov50": 2, "cov80": 2, "cov90": 2, "hw90": 2, "cov95": 2, "hw95": 2, "mlpd": 2, "eta_rmse": 3}
    digits |= {f"t_{k}": digits[k] for k in TIME_METRICS} | {"divergences": 0, "max_rhat": 3}
    tab = pd.DataFrame({"setting": summary["setting"], "model": summary["model"], "splits": summary["n_splits"]})
    for m, d in digits.items():
        tab[m] = [cell(r, m, d) for _, r in summary.iterrows()]
    return markdown(tab)


def run(seed: int = 2026, n_splits: int = 20, quick: bool = False, draws: int = 1000, tune: int = 300,
        chains: int = 2, models: tuple[str, ...] = tuple(POINT_MODELS) + BAYES_MODELS,
        settings: tuple[str, ...] = SETTINGS + EXTRA_SETTINGS, out: Path | None = None,
        data: str | None = None, tag: str | None = None, inner: bool = False, eigval_cutoff: float | None = None,
        fresh: bool = False, laplace: bool | None = None, target_accept: float | None = None, log=print) -> pd.DataFrame:
    """Run the protocol; write ``mayaki2026_seedN.csv`` (+ ``.md`` and per-split rows); return the summary.

    Goes on from the partial rows of an interrupted run with the same arguments unless ``fresh``
    (module docstring).
    """
    t_start = time.perf_counter()
    _check_names("model", models, (*POINT_MODELS, *BAYES_VARIANTS))
    _check_names("setting", settings, (*SETTINGS, *EXTRA_SETTINGS))
    out = Path(out) if out is not None else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    stem = (f"mayaki2026_seed{seed}" + ("_inner" if inner else "") + ("_quick" if quick else "")
            + (f"_{tag}" if tag else ""))
    nuts = nuts_settings(target_accept=target_accept, eigval_cutoff=eigval_cutoff)
    # None: each fit's own default (energy and time's part whitened, the curves and a model sampled whole not);
    # resolving it here to the whole model's LAPLACE left energy and time unwhitened in every split fit in parts
    laplace = None if laplace is None else bool(laplace)
    args = {"seed": seed, "n_splits": n_splits, "quick": quick, "draws": draws, "tune": tune, "chains": chains,
            "models": list(models), "settings": list(settings), "data": str(data) if data else None, "inner": inner,
            "eigval_cutoff": nuts["mass_matrix_eigval_cutoff"], "window": nuts["mass_matrix_switch_freq"], "laplace": laplace,
            "target_accept": nuts["target_accept"]}
    partial = out / f"{stem}_splits.partial.csv"
    records, done, t_before = _resume(partial, args, fresh, log)
    df = load_mayaki2026(data)
    runners = {}
    for name in BAYES_VARIANTS:
        if name in models:
            runners[name] = BayesRunner(name, df, draws=draws, tune=tune, chains=chains, eigval_cutoff=eigval_cutoff,
                                        laplace=laplace, target_accept=target_accept)
            log(f"compiled {name} in {runners[name].compile_s:.0f} s")
    for setting in settings:
        table = setting_table(df, setting)
        if setting == "new_hw":
            splits = []
            for hw in sorted(table["hardware"].unique()):
                tr = np.flatnonzero(table["hardware"] != hw)
                fams = set(table["family"].iloc[tr])
                te = np.flatnonzero((table["hardware"] == hw) & table["family"].isin(fams))
                splits.append((tr, te))
        elif setting == "new_cell":
            # each hardware x family cell whose hardware and family both occur in other cells
            splits = []
            for (hw, fam), rows in table.groupby(["hardware", "family"]).groups.items():
                rest = table.drop(index=rows)
                if hw in set(rest["hardware"]) and fam in set(rest["family"]):
                    splits.append((table.index.difference(rows).to_numpy(), np.asarray(rows)))
        else:
            splits = grouped_splits(table, n_splits, seed)
            if inner:
                splits = [inner_split(table, tr, seed + i) for i, (tr, _) in enumerate(splits)]
        for i, (tr, te) in enumerate(splits):
            if (setting, i) in done:
                continue
            train, test = table.iloc[tr].reset_index(drop=True), table.iloc[te].reset_index(drop=True)
            t0 = time.perf_counter()
            results = {}
            for name in models:
                if name in POINT_MODELS:
                    if setting in EXTRA_SETTINGS and name.startswith("gb"):
                        continue  # unseen category: not a meaningful anchor
                    results[name] = evaluate_point(name, train, test, seed + i)
                elif name in runners:
                    if name in EXTRA_ONLY and setting not in EXTRA_SETTINGS:
                        continue
                    if setting in EXTRA_SETTINGS and BAYES_VARIANTS[name][0] == "pooled":
                        continue  # no population distribution for new hardware x family cells
                    results.update(evaluate_bayes(runners[name], train, test, seed + i))
            for name, m in results.items():
                records.append({"setting": setting, "split": i, "model": name, "n_train": len(train),
                                "n_test": len(test), **m})
            _save_partial(partial, records, args, t_before + time.perf_counter() - t_start)
            log(f"{setting} split {i + 1}/{len(splits)}: {time.perf_counter() - t0:.1f} s")
    rows = pd.DataFrame.from_records(records)
    for m in METRICS:
        if m not in rows:
            rows[m] = np.nan
    summary = summarise(rows)
    wall = t_before + time.perf_counter() - t_start
    summary.to_csv(out / f"{stem}.csv", index=False, float_format="%.5g")
    rows.to_csv(out / f"{stem}_splits.csv", index=False, float_format="%.5g")
    conf = (f"seed {seed}; {summary['n_splits'].max()} splits per setting; Bayesian fits: {chains} chains x "
            f"{tune} tune + {draws} draws (nutpie, target acceptance {nuts['target_accept']:g}, low-rank mass matrix, "
            f"eigenvalue cutoff {nuts['mass_matrix_eigval_cutoff']:g}, window {nuts['mass_matrix_switch_freq']}"
            + ("; whitened at the mode (Laplace)" if laplace else "") + "; " + _parts_note(target_accept, laplace)
            + f"); wall time {wall:.0f} s on "
            f"{_cpus()} CPU(s)" + (" over more than one process (resumed)" if t_before else ""))
    (out / f"{stem}.md").write_text(
        f"# Mayaki (2026) grouped cross-validation, {conf}\n\n"
        "Median [interquartile range] over splits; held-out rows, ln kWh. `hw95`: multiplicative "
        "half-width of the 95 % interval. `new_hw`: one hardware type left out (one split each). "
        "`new_cell`: one hardware x family cell left out whose hardware and family occur in other cells. "
        "`t_*`: the run time (ln s), for the models that predict it.\n\n"
        + markdown_table(summary) + "\n" + convergence_line(rows) + "\n")
    plot_coverage(summary, out / f"{stem}_coverage.png", f"Held-out coverage of central intervals, {conf.split(';')[0]}")
    for path in _partial_files(partial):
        path.unlink(missing_ok=True)
    log(f"wrote {out / (stem + '.csv')} ({wall:.0f} s)")
    return summary


def _check_names(kind: str, given: tuple[str, ...], known: tuple[str, ...]) -> None:
    """Refuse a model or setting name the harness does not know, naming the closest known ones."""
    import difflib

    for name in given:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise SystemExit(f"unknown {kind} {name!r}{hint} Known: {', '.join(known)}")


def plot_coverage(summary: pd.DataFrame, path: Path, title: str) -> None:
    """Coverage of the 50-95 % intervals against their level, per setting and model (median and IQR over splits).

    A calibrated model lies on the diagonal; the legend gives each model's 90 % multiplicative half-width,
    so a model that covers by being wide shows it.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = list(dict.fromkeys(summary["setting"]))
    levels = np.asarray(LEVELS)
    cols = [f"cov{round(lv * 100)}" for lv in LEVELS]
    fig, axes = plt.subplots(1, len(settings), figsize=(3.6 * len(settings), 3.8), squeeze=False, sharey=True)
    for ax, setting in zip(axes[0], settings):
        ax.plot([0.45, 1.0], [0.45, 1.0], color="grey", lw=1, ls="--")
        for _, r in summary[summary["setting"] == setting].iterrows():
            med = r[cols].to_numpy(float)
            err = np.abs(np.vstack([r[[c + "_q25" for c in cols]].to_numpy(float),
                                    r[[c + "_q75" for c in cols]].to_numpy(float)]) - med)
            ax.errorbar(levels, med, yerr=err, marker="o", ms=3, capsize=2, lw=1,
                        label=f"{r['model']} (x{r['hw90']:.2f})")
        ax.set_title(setting)
        ax.set_xlabel("nominal level")
        ax.legend(fontsize=6, loc="best")
    axes[0][0].set_ylabel("held-out coverage (ln kWh)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _partial_files(partial: Path) -> tuple[Path, Path]:
    """The partial rows and the arguments of the run that wrote them."""
    return partial, partial.with_suffix(".json")


def _save_partial(partial: Path, records: list[dict], args: dict, elapsed: float) -> None:
    """Write the rows so far and the run's arguments, each replacing its file in one step."""
    from bayes_energy.cli import write_file

    rows_file, args_file = _partial_files(partial)
    write_file(args_file, lambda f: f.write_text(json.dumps(args | {"elapsed_s": elapsed}, indent=1)))
    write_file(rows_file, lambda f: pd.DataFrame.from_records(records).to_csv(f, index=False))


def _resume(partial: Path, args: dict, fresh: bool, log) -> tuple[list[dict], set, float]:
    """Rows, finished ``(setting, split)`` pairs and seconds spent of an interrupted run with these arguments."""
    rows_file, args_file = _partial_files(partial)
    if not rows_file.exists():
        return [], set(), 0.0
    if fresh:
        log(f"--fresh: dropping the interrupted run's rows in {rows_file}")
        for path in (rows_file, args_file):
            path.unlink(missing_ok=True)
        return [], set(), 0.0
    saved = json.loads(args_file.read_text()) if args_file.exists() else {}
    elapsed = float(saved.pop("elapsed_s", 0.0))
    differ = sorted(k for k in args.keys() | saved.keys() if args.get(k) != saved.get(k))
    if differ:
        detail = "; ".join(f"{k}: {saved.get(k)!r} there, {args.get(k)!r} now" for k in differ)
        raise SystemExit(f"{rows_file} holds an interrupted run with other arguments ({detail}). Re-run with its "
                         "arguments to go on, give another --tag, or pass --fresh to start over.")
    prev = pd.read_csv(rows_file)
    done = set(zip(prev["setting"], prev["split"].astype(int)))
    log(f"going on from {rows_file}: {len(done)} split(s) done in {elapsed:.0f} s")
    records = [{k: v for k, v in r.items() if not (isinstance(v, float) and np.isnan(v))}
               for r in prev.to_dict("records")]
    return records, done, elapsed


def convergence_line(rows: pd.DataFrame) -> str:
    """How many Bayesian split fits end above R-hat 1.01, and how many of those had a chain in a minor mode."""
    fits = rows[rows["model"].str.endswith("_pre") & rows["max_rhat"].notna()]
    bad = fits[fits["max_rhat"] > 1.01]
    modes = int((bad["minor_mode_chains"].fillna(0) > 0).sum()) if "minor_mode_chains" in bad else 0
    return (f"Bayesian split fits above R-hat 1.01: {len(bad)} of {len(fits)} (above 1.1: "
            f"{int((bad['max_rhat'] > 1.1).sum())}); of those, with a chain in a minor mode: {modes}.")


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--splits", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="2 splits per setting, 2 chains x 150 + 150 draws")
    # 2 chains x (300 + 1000): every split's max R-hat <= 1.008 on 6 trial splits (pooled, bert), ~15 s a pooled
    # split with models.sample.nuts_settings; 300 draws ended at R-hat 1.02-1.03 (docs/speed.md, section 5)
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--tune", type=int, default=300)
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--eigval-cutoff", type=float, default=None,
                   help="nutpie's low-rank eigenvalue cutoff (default bayes_energy.models.sample.EIGVAL_CUTOFF)")
    p.add_argument("--target-accept", type=float, default=None,
                   help="NUTS target acceptance (default bayes_energy.models.sample.TARGET_ACCEPT)")
    p.add_argument("--laplace", action=argparse.BooleanOptionalAction, default=None,
                   help="sample on coordinates whitened at the mode (default: each fit's own, bayes_energy.models.parts.PART_SAMPLING in parts, bayes_energy.models.sample.LAPLACE whole)")
    p.add_argument("--models", default=",".join(tuple(POINT_MODELS) + BAYES_MODELS))
    p.add_argument("--settings", default=",".join(SETTINGS + EXTRA_SETTINGS))
    p.add_argument("--out", default=None, help="output folder (default benchmarks/results)")
    p.add_argument("--data", default=None, help="the authors' CSV or its folder (default: see find_mayaki2026)")
    p.add_argument("--tag", default=None, help="suffix of the output files (e.g. an ablation's name)")
    p.add_argument("--inner", action="store_true",
                   help="evaluate on a grouped split inside each outer training part (for choosing a model "
                        "without looking at the outer test parts)")
    p.add_argument("--fresh", action="store_true",
                   help="start over instead of going on from an interrupted run's partial rows")
    a = p.parse_args(argv)
    if a.quick:
        a.splits, a.draws, a.tune = min(a.splits, 2), min(a.draws, 150), min(a.tune, 150)
    warnings.filterwarnings("ignore", category=FutureWarning)
    try:
        run(seed=a.seed, n_splits=a.splits, quick=a.quick, draws=a.draws, tune=a.tune, chains=a.chains,
            models=tuple(a.models.split(",")), settings=tuple(a.settings.split(",")), out=a.out, data=a.data, tag=a.tag,
            inner=a.inner, eigval_cutoff=a.eigval_cutoff, fresh=a.fresh, laplace=a.laplace, target_accept=a.target_accept, log=lambda s: print(s, flush=True))
    except KeyboardInterrupt:
        print("interrupted; the finished splits are kept, re-run the same command to go on", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
