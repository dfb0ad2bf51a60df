r"""Which run to measure next: Bayesian sweep design.

``next_runs(idata, targets, pool, k)`` picks, from a ``pool`` of
configurations one could measure, the ``k`` runs that are expected to shrink
the predictive uncertainty of the ``targets`` (the jobs one wants to predict,
e.g. the production fine-tuning on 8 GPUs) most per unit of measurement cost,
in order, with the expected reduction of each. It writes the picks as a sweep
plan that ``python -m bayes_energy.runner.sweep`` runs.

The criterion (a linear-Gaussian approximation over the posterior draws)
----------------------------------------------------------------------
Let :math:`f` be the expected outcomes (ln energy and ln time, pre-run: the
efficiency from the speedup curves) of every target and pool run, one vector
per posterior draw (:func:`bayes_energy.predict.predict_draws` with
``residual=False``, all candidates in one call, so the draws are joint).
Treat :math:`f` as jointly Gaussian with the covariance :math:`\Sigma` of
those draws. Measuring pool run :math:`j` observes
:math:`y_j = f_j + \varepsilon_j` (its ln energy and ln time), with
:math:`\varepsilon_j` Gaussian with covariance :math:`N_j`: the residual
noise and the run's own efficiency scatter, estimated from the draws of the
posterior-predictive outcome minus the expected one (the same random
streams, so the difference is the noise alone; winsorised at its 1 % and
99 % quantiles, since the models' Student-t residuals have heavy tails whose
variance a Gaussian would overstate). Conditioning on :math:`y_j` lowers the
variance of target quantity :math:`t` by

.. math::

    \Delta_j(t) = \Sigma_{t,J}\,(\Sigma_{J,J} + N_j)^{-1}\,\Sigma_{J,t},
    \qquad J = (\ln E_j, \ln T_j),

the 2-outcome form of :math:`\operatorname{Cov}(t, j)^2 / (\operatorname{Var}(j) + \sigma_j^2)`.
It does not depend on the value :math:`y_j` will take, so it is the expected
reduction. The score of run :math:`j` is :math:`\sum_t \Delta_j(t)` over the
targets' ln energy and ln time (or the outcomes chosen), divided by its cost
(its predicted median energy, time or GPU time). Picks are greedy: after each
pick :math:`\Sigma` is conditioned on it (a rank-two update kept in low-rank
form, so a pool of 10 000 runs costs memory linear in its size), and the
next pick is the best given those already chosen. A run is picked at most
once.

What the approximation leaves out: posteriors far from Gaussian (the
reduction of a skewed or bimodal posterior's variance is only approximated);
the information a run carries about the noise scales and the Student-t tails;
and the Monte Carlo error of :math:`\Sigma` (use a few hundred draws or more;
its rank is at most the number of draws). The expected reductions are those
of the model's own uncertainty: how well they translate into accuracy after
a refit is measured in ``benchmarks/design_mayaki2026.py``.

Command line::

    python -m bayes_energy.design --posterior fits/mine/posterior.nc --targets targets.csv \
        --pool pool.csv --k 8 --out next.csv [--plan next.toml] [--cost energy|time|gpu_time|none]

writes the ranked picks (CSV) and a sweep plan (TOML) of those the runner
can build (BERT-family workloads; the hardware is the machine it runs on, so
the plan says which hardware each pick is for).
"""

from __future__ import annotations

import math
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .predict import NewLevelWarning, check_candidates, predict_draws
from .schema import SchemaError

__all__ = ["next_runs", "Design", "COSTS", "plan_toml"]

#: Measurement costs: predicted median energy (J), time (s), device time (GPU-s), or none (count runs).
COSTS = ("energy", "time", "gpu_time", "none")
_OUTCOMES = {"energy": "log_energy_j", "time": "log_time_s"}
#: Added to every noise variance: keeps the 2 x 2 solves well posed when a run's noise is ~0.
_JITTER = 1e-9
#: Winsorisation quantiles of the noise draws (see the module docstring).
_WINSOR = (0.01, 0.99)


@dataclass
class Design:
    """The result of :func:`next_runs`.

    Attributes
    ----------
    runs : pandas.DataFrame
        The ``k`` picks in order: ``rank`` (1 first), ``pool_row`` (0-based
        row of the pool table), the pool's columns, ``cost`` and
        ``cost_unit``, ``expected_var_reduction`` (sum over the targets of the
        expected drop in the variance of their ln outcomes, given the picks
        before it), ``reduction_per_cost`` (the greedy score) and
        ``targets_var_after`` (the targets' summed variance of the expected
        outcome once this and all earlier picks are measured).
    targets : pandas.DataFrame
        The targets with, for each outcome, the predictive sd of its ln value
        now (``sd_log_energy_now``) and expected after measuring all ``k``
        picks (``sd_log_energy_after``); predictive sds include the
        irreducible noise, so they cannot fall below it.
    """

    runs: pd.DataFrame
    targets: pd.DataFrame

    def plan_toml(self, name: str = "design") -> str:
        """The picks as a sweep plan for ``python -m bayes_energy.runner.sweep`` (see :func:`plan_toml`)."""
        return plan_toml(self.runs, name=name)


def _known_hardware(idata) -> list[str]:
    from .models.io import posterior_of

    return list(posterior_of(idata).spec.config["levels"]["hardware"])


def _resolve(df: pd.DataFrame, known: list[str], source: str) -> pd.DataFrame:
    """Map short hardware names to the posterior's; refuse hardware it has not seen."""
    out = df.copy()
    values = out["hardware"].astype(str)
    mapping = {}
    for name in values.unique():
        if name in known:
            mapping[name] = name
            continue
        hits = [k for k in known if name.lower() in k.lower()]
        if len(hits) == 1:
            mapping[name] = hits[0]
            continue
        i = int(np.flatnonzero((values == name).to_numpy())[0])
        why = f"is ambiguous (matches {', '.join(hits)})" if hits else "was not in the posterior's training data"
        raise SchemaError(f"{source}: row {i + 2}, column 'hardware': {name!r} {why}; the posterior knows "
                          f"{', '.join(known)} (design needs measured hardware: a run on unseen hardware "
                          f"informs nothing about the others here)")
    out["hardware"] = values.map(mapping)
    return out


def _cost(cost, draws_y: dict, pool: pd.DataFrame, P: int) -> tuple[np.ndarray, str]:
    if isinstance(cost, str) or cost is None:
        kind = "none" if cost is None else cost
        if kind not in COSTS:
            raise ValueError(f"cost must be one of {', '.join(COSTS)} or an array of pool costs, got {cost!r}")
        if kind == "none":
            return np.ones(P), "run"
        if kind == "energy":
            return np.exp(np.median(draws_y["log_energy_j"], axis=0)), "J"
        t = np.exp(np.median(draws_y["log_time_s"], axis=0))
        return (t, "s") if kind == "time" else (t * pool["n_gpus"].to_numpy(float), "GPU-s")
    c = np.asarray(cost, dtype=float).ravel()
    if c.shape != (P,):
        raise ValueError(f"cost: expected one value per pool row ({P}), got {c.size}")
    if not np.all(np.isfinite(c) & (c > 0)):
        i = int(np.flatnonzero(~(np.isfinite(c) & (c > 0)))[0])
        raise ValueError(f"cost: pool row {i}: expected a positive cost, got {c[i]!r}")
    return c, "given"


def _noise_cov(noise_e: np.ndarray, noise_t: np.ndarray) -> np.ndarray:
    """(P, 2, 2) covariance of each run's (ln E, ln T) noise draws, winsorised per run."""
    def wins(x):
        lo, hi = np.quantile(x, _WINSOR, axis=0)
        return np.clip(x, lo, hi)

    e, t = wins(noise_e), wins(noise_t)
    e = e - e.mean(axis=0)
    t = t - t.mean(axis=0)
    d = e.shape[0] - 1
    N = np.empty((e.shape[1], 2, 2))
    N[:, 0, 0] = (e * e).sum(0) / d
    N[:, 1, 1] = (t * t).sum(0) / d
    N[:, 0, 1] = N[:, 1, 0] = (e * t).sum(0) / d
    N[:, 0, 0] += _JITTER
    N[:, 1, 1] += _JITTER
    return N


def _inv2(G: np.ndarray) -> np.ndarray:
    """Inverse of 2 x 2 matrices (..., 2, 2)."""
    a, b, c, d = G[..., 0, 0], G[..., 0, 1], G[..., 1, 0], G[..., 1, 1]
    det = a * d - b * c
    out = np.empty_like(G)
    out[..., 0, 0], out[..., 0, 1], out[..., 1, 0], out[..., 1, 1] = d / det, -b / det, -c / det, a / det
    return out


def greedy_select(Lt: np.ndarray, LpE: np.ndarray, LpT: np.ndarray, N: np.ndarray, cost: np.ndarray,
                  k: int) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """Greedy batch selection under the linear-Gaussian approximation.

    Parameters
    ----------
    Lt : (m, D) array
        Centred draws of the target quantities, divided by sqrt(D - 1)
        (so ``Lt @ Lt.T`` is their covariance).
    LpE, LpT : (P, D) arrays
        The same for the pool runs' expected ln energy and ln time.
    N : (P, 2, 2) array
        Noise covariance of each pool run's (ln E, ln T) observation.
    cost : (P,) array
    k : int

    Returns
    -------
    picks : list of int
    reductions : (k,) array
        Expected reduction of the summed target variance by each pick.
    var_after : (k,) array
        Summed target variance after each pick.
    tv : (m,) array
        Each target quantity's variance after all picks.
    """
    P = LpE.shape[0]
    CE, CT = Lt @ LpE.T, Lt @ LpT.T  # (m, P) target x pool covariances
    V = np.empty((P, 2, 2))  # current pool blocks + noise
    V[:, 0, 0] = np.einsum("pd,pd->p", LpE, LpE)
    V[:, 1, 1] = np.einsum("pd,pd->p", LpT, LpT)
    V[:, 0, 1] = V[:, 1, 0] = np.einsum("pd,pd->p", LpE, LpT)
    V += N
    tv = np.einsum("md,md->m", Lt, Lt)
    history: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (U_E (P,2), U_T (P,2), G^-1)
    chosen = np.zeros(P, dtype=bool)
    picks, reductions, after = [], [], []
    for _ in range(k):
        M = np.empty((P, 2, 2))
        M[:, 0, 0] = (CE * CE).sum(0)
        M[:, 1, 1] = (CT * CT).sum(0)
        M[:, 0, 1] = M[:, 1, 0] = (CE * CT).sum(0)
        Vi = _inv2(V)
        score = np.einsum("pij,pji->p", Vi, M)  # trace(G^-1 M): summed variance reduction
        score = np.maximum(score, 0.0)  # round-off
        ratio = np.where(chosen, -np.inf, score / cost)
        j = int(np.argmax(ratio))
        chosen[j] = True
        Ginv = Vi[j]
        # current covariances of every pool quantity with the pick's (ln E, ln T)
        LJ = np.stack([LpE[j], LpT[j]])  # (2, D)
        UE, UT = LpE @ LJ.T, LpT @ LJ.T  # (P, 2)
        for hE, hT, hG in history:
            uj = np.stack([hE[j], hT[j]])  # (2, 2): pick's (E, T) x earlier pick's (E, T)
            UE -= hE @ hG @ uj.T
            UT -= hT @ hG @ uj.T
        Bt = np.stack([CE[:, j], CT[:, j]], axis=1)  # (m, 2)
        red_t = np.einsum("mi,ij,mj->m", Bt, Ginv, Bt)
        reductions.append(float(red_t.sum()))
        tv = tv - red_t
        after.append(float(tv.sum()))
        CE -= Bt @ Ginv @ UE.T
        CT -= Bt @ Ginv @ UT.T
        U = np.stack([UE, UT], axis=1)  # (P, 2 [E, T of the pool run], 2 [E, T of the pick])
        V -= np.einsum("pai,ij,pbj->pab", U, Ginv, U)
        history.append((UE, UT, Ginv))
        picks.append(j)
    return picks, np.array(reductions), np.array(after), np.maximum(tv, 0.0)


def next_runs(idata, targets: pd.DataFrame, pool: pd.DataFrame, k: int = 8, cost="energy",
              outcomes=("energy", "time"), n_draws: int | None = 1000, seed: int | None = 0) -> Design:
    r"""The ``k`` pool runs that most reduce the targets' predictive uncertainty per unit cost.

    Greedy batch design under a linear-Gaussian approximation of the joint
    posterior draws (stated in full in the module docstring): the expected
    outcomes of targets and pool runs are treated as jointly Gaussian with
    the covariance of their posterior draws; measuring pool run :math:`j`
    (ln energy and ln time, with noise covariance :math:`N_j` from the
    posterior-predictive draws) lowers the variance of target quantity
    :math:`t` by :math:`\Sigma_{tJ}(\Sigma_{JJ}+N_j)^{-1}\Sigma_{Jt}`; each
    pick maximises the summed reduction over the targets divided by its
    cost, given the picks before it (conditioned in by a rank-two update).

    Parameters
    ----------
    idata : arviz.InferenceData
        A posterior from :func:`bayes_energy.models.sample.fit` (or
        :func:`bayes_energy.models.refit.refit`).
    targets : pandas.DataFrame
        The runs to predict (:data:`bayes_energy.predict.PRE_RUN_COLUMNS`).
    pool : pandas.DataFrame
        The runs one could measure (same columns; ``heads`` too, to write a
        sweep plan). Hardware must be hardware the posterior has seen (short
        names such as ``A100`` are matched as in :mod:`bayes_energy.plan`).
    k : int, default 8
        How many runs to pick (at most the pool's size).
    cost : {"energy", "time", "gpu_time", "none"} or array-like, default "energy"
        The cost of measuring each pool run: its predicted median energy (J),
        time (s) or device time (``time x n_gpus``, GPU-s), 1 per run, or
        given values (one positive number per pool row).
    outcomes : sequence of {"energy", "time"}, default both
        The targets' quantities whose variance (on the log scale) counts.
    n_draws : int or None, default 1000
        Thin the posterior to this many draws (None: all).
    seed : int, optional
        Seed of the predictive draws (results are deterministic given it).

    Returns
    -------
    Design
        ``runs`` (the picks, in order, with the expected reduction of each)
        and ``targets`` (predictive sds now and expected after the picks).

    Raises
    ------
    SchemaError
        A table misses columns, has bad values, or names hardware the
        posterior has not seen (the message lists the known hardware).
    ValueError
        ``k`` below 1 or above the pool's size, or a bad ``cost``/``outcomes``.

    Examples
    --------
    >>> d = next_runs(idata, targets, pool, k=8, cost="energy")  # doctest: +SKIP
    >>> d.runs[["rank", "strategy", "n_gpus", "expected_var_reduction", "cost"]]  # doctest: +SKIP
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a whole number >= 1, got {k!r}")
    outcomes = (outcomes,) if isinstance(outcomes, str) else tuple(outcomes)
    if not outcomes or any(o not in _OUTCOMES for o in outcomes):
        raise ValueError(f"outcomes must be among {', '.join(_OUTCOMES)}, got {outcomes!r}")
    if not isinstance(targets, pd.DataFrame) or not isinstance(pool, pd.DataFrame):
        raise SchemaError("targets and pool must be tables (pandas DataFrames)")
    if len(pool) == 0:
        raise SchemaError("pool: no rows; list the configurations you could measure")
    tg = check_candidates(targets, "targets")
    pl = check_candidates(pool, "pool")
    if k > len(pl):
        raise ValueError(f"k = {k} is larger than the pool ({len(pl)} runs); ask for at most {len(pl)}")
    known = _known_hardware(idata)
    tg, pl = _resolve(tg, known, "targets"), _resolve(pl, known, "pool")
    cols = list(dict.fromkeys([*tg.columns.intersection(pl.columns)]))
    both = pd.concat([tg[cols], pl[cols]], ignore_index=True)
    nT, P = len(tg), len(pl)
    f = predict_draws(idata, both, residual=False, n_draws=n_draws, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NewLevelWarning)  # warned once, by the first call
        y = predict_draws(idata, both, residual=True, n_draws=n_draws, seed=seed)
    D = f["log_energy_j"].shape[0]
    if D < 3:
        raise ValueError(f"the posterior has {D} draws; the design needs a few hundred")

    def centred(a):
        return ((a - a.mean(axis=0)) / math.sqrt(D - 1)).T  # (quantity, draw)

    Lt = np.concatenate([centred(f[_OUTCOMES[o]][:, :nT]) for o in outcomes])
    LpE, LpT = centred(f["log_energy_j"][:, nT:]), centred(f["log_time_s"][:, nT:])
    N = _noise_cov(y["log_energy_j"][:, nT:] - f["log_energy_j"][:, nT:],
                   y["log_time_s"][:, nT:] - f["log_time_s"][:, nT:])
    pool_y = {key: v[:, nT:] for key, v in y.items()}
    c, unit = _cost(cost, pool_y, pl, P)
    picks, red, after, tv = greedy_select(Lt, LpE, LpT, N, c, k)

    runs = pool.reset_index(drop=True).iloc[picks].copy()
    runs["hardware"] = pl["hardware"].iloc[picks].to_numpy()
    runs.insert(0, "pool_row", picks)
    runs.insert(0, "rank", np.arange(1, k + 1))
    runs["cost"] = c[picks]
    runs["cost_unit"] = unit
    runs["expected_var_reduction"] = red
    runs["reduction_per_cost"] = red / c[picks]
    runs["targets_var_after"] = after
    runs = runs.reset_index(drop=True)

    tab = targets.reset_index(drop=True).copy()
    tab["hardware"] = tg["hardware"].to_numpy()
    for i, o in enumerate(outcomes):
        key = _OUTCOMES[o]
        noise = y[key][:, :nT] - f[key][:, :nT]
        lo, hi = np.quantile(noise, _WINSOR, axis=0)
        nv = np.clip(noise, lo, hi).var(axis=0, ddof=1)
        now = (Lt[i * nT:(i + 1) * nT] ** 2).sum(axis=1)
        tab[f"sd_{key.rsplit('_', 1)[0]}_now"] = np.sqrt(now + nv)
        tab[f"sd_{key.rsplit('_', 1)[0]}_after"] = np.sqrt(tv[i * nT:(i + 1) * nT] + nv)
    return Design(runs=runs, targets=tab)


# ------------------------------------------------------------------ the sweep plan
def _toml_value(v) -> str:
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(v)


def plan_toml(runs: pd.DataFrame, name: str = "design") -> str:
    """A sweep plan (TOML) of the picks the runner can build, one ``[[config]]`` each, in order.

    The runner builds BERT-family workloads on the machine it runs on: picks
    of another family, or that the runner would refuse (e.g. ``heads`` not
    dividing the width), are listed as comments with the reason; each pick
    says the hardware it is meant for. Token counts are not part of a plan
    (the runner measures a fixed number of steps).

    Raises
    ------
    ValueError
        When ``runs`` has no ``heads`` column, or no pick can be run.
    """
    from .runner.plan import RunConfig

    if "heads" not in runs.columns:
        raise ValueError("a sweep plan needs the attention heads of each pick: add a 'heads' column to the pool")
    hw = list(dict.fromkeys(runs["hardware"].astype(str)))
    lines = [f"# Next runs picked by bayes_energy.design ({len(runs)} in order of expected value per cost).",
             "# Run with: python -m bayes_energy.runner.sweep THIS.toml --out SWEEP.csv  (on the hardware named per run)"]
    if len(hw) > 1:
        lines.append(f"# The picks are for {len(hw)} hardware types ({', '.join(hw)}): run each pick on its hardware,"
                     " e.g. one copy of this plan per machine with the others' picks removed.")
    lines += ["", "[sweep]", f"name = {_toml_value(name)}",
              'description = "runs chosen by bayes_energy.design to shrink the targets\' intervals fastest"', ""]
    n_ok = 0
    for _, r in runs.iterrows():
        d = {c: int(r[c]) for c in ("num_layers", "hidden_size", "heads", "ff", "seq_len", "batch_size", "n_gpus")}
        d["grad_accum"] = int(r["grad_accum"]) if "grad_accum" in r and pd.notna(r["grad_accum"]) else 1
        d["strategy"] = str(r["strategy"]).lower()
        d["family"] = str(r["family"]).lower()
        head = (f"# rank {int(r['rank'])} on {r['hardware']}: expected variance reduction "
                f"{r['expected_var_reduction']:.4g}, cost {r['cost']:.4g} {r['cost_unit']}")
        problems = RunConfig(**d).problems()
        body = ["[[config]]"] + [f"{key} = {_toml_value(v)}" for key, v in d.items()]
        if problems:
            lines += [head + f" -- not runnable by this runner: {'; '.join(problems)}"] + ["# " + b for b in body] + [""]
        else:
            n_ok += 1
            lines += [head] + body + [""]
    if n_ok == 0:
        raise ValueError("none of the picks can be run by bayes_energy.runner.sweep (it builds BERT-family workloads only)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m bayes_energy.design``."""
    from .cli import OutputError, Parser, check_output_file, fail, plain_warnings, positive_int, write_file
    from .datasets import read_csv

    parser = Parser(prog="python -m bayes_energy.design",
                    description="Pick the runs to measure next: those that shrink the targets' "
                                "predictive uncertainty most per unit cost.")
    parser.add_argument("--posterior", required=True, help="posterior.nc written by bayes_energy.fit")
    parser.add_argument("--targets", required=True, help="CSV of the runs to predict")
    parser.add_argument("--pool", required=True, help="CSV of the runs one could measure")
    parser.add_argument("--k", type=positive_int, default=8, help="runs to pick (default %(default)s)")
    parser.add_argument("--out", required=True, help="CSV of the picks, in order")
    parser.add_argument("--plan", help="sweep plan TOML to write (default: --out with .toml)")
    parser.add_argument("--cost", choices=COSTS, default="energy",
                        help="cost of a measurement: predicted energy, time, GPU time or none (default %(default)s)")
    parser.add_argument("--outcomes", nargs="+", choices=tuple(_OUTCOMES), default=list(_OUTCOMES),
                        help="targets' quantities to make sure (default: energy time)")
    parser.add_argument("--draws", type=positive_int, default=1000, help="posterior draws used (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overwrite", action="store_true", help="replace existing output files")
    args = parser.parse_args(argv)
    plain_warnings()
    from .models.io import PosteriorFileError, load

    try:
        if args.draws < 3:
            raise ValueError(f"--draws must be at least 3, got {args.draws}")
        out = check_output_file(args.out, "--out", overwrite=args.overwrite)
        plan_path = check_output_file(args.plan or Path(args.out).with_suffix(".toml"), "--plan",
                                      overwrite=args.overwrite)
        targets = read_csv(args.targets, what="targets table")
        pool = read_csv(args.pool, what="pool table")
        idata = load(args.posterior)
        design = next_runs(idata, targets, pool, k=args.k, cost=args.cost, outcomes=args.outcomes,
                           n_draws=args.draws, seed=args.seed)
        try:
            toml = design.plan_toml(name=out.stem)
        except ValueError as err:
            toml, note = None, str(err)
    except (SchemaError, PosteriorFileError, OutputError, ValueError, FileNotFoundError) as err:
        return fail(err)
    write_file(out, lambda tmp: design.runs.to_csv(tmp, index=False))
    print(f"wrote the {len(design.runs)} next runs to {out}")
    if toml is not None:
        write_file(plan_path, lambda tmp: Path(tmp).write_text(toml))
        print(f"wrote the sweep plan {plan_path}")
    else:
        print(f"note: no sweep plan written: {note}", file=sys.stderr)
    t = design.targets
    for key in ("log_energy", "log_time"):
        if f"sd_{key}_now" in t:
            print(f"targets' predictive sd of {key.replace('log_', 'ln ')}: median {t[f'sd_{key}_now'].median():.3f} now, "
                  f"{t[f'sd_{key}_after'].median():.3f} expected after the {len(design.runs)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
