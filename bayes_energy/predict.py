"""Posterior-predictive energy and time for runs not yet made.

``predict(idata, configs)`` evaluates the fitted law in numpy over every
posterior draw (the same functions the PyMC model uses, from
:mod:`bayes_energy.models.law`), in chunks of candidates so that memory stays
bounded, and summarises each candidate's predictive distribution.

Pre-run (the default): the efficiency comes from the posterior speedup
curves, with their residual scatter, so device counts never measured are
allowed and carry the curves' uncertainty. Hardware x family cells or
configuration families the model has not seen draw their effects from the
fitted population distribution (with a warning); the pooled model has no
population for new hardware and refuses.

Speed: candidates are sorted by hardware x family cell and curve and cut
into chunks of ~2 MiB of float32 (sample x candidate), so each chunk's work
stays in cache and memory stays bounded; chunks run on threads (numpy
releases the GIL), each with its own random stream, so results do not
depend on the thread count. 10 000 candidates x 4000 draws take ~0.8 s on
2 cores (``benchmarks/bench_predict.py``).

Command line::

    python -m bayes_energy.predict --posterior fits/default/posterior.nc \\
        --configs candidates.csv --out predictions.csv [--prob 0.9]
"""

from __future__ import annotations

import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd

from . import DEFAULT_PROB, threads
from .models.predictive import energy_time_draws, log_eta_draws, standard_variates
from .models.spec import ModelSpec, by_coef, cell_labels, group_keys
from .schema import KWH_TO_J, POST_RUN, SchemaError, validate_configs

__all__ = ["predict", "predict_draws", "check_candidates", "unknown_hardware", "PRE_RUN_COLUMNS",
           "NewLevelWarning", "SpecPlacementWarning", "ExtrapolationWarning", "placement"]

#: Columns a candidate needs (``grad_accum`` defaults to 1).
PRE_RUN_COLUMNS = ("hardware", "family", "num_layers", "hidden_size", "ff", "seq_len", "batch_size",
                   "tokens", "strategy", "n_gpus")
_DTYPE = np.float32
#: Sample x candidate elements per chunk: 2 MiB of float32, so a chunk's work stays in cache.
_CHUNK_ELEMENTS = 1 << 19


class NewLevelWarning(UserWarning):
    """A candidate's hardware x family cell was not in the training data."""


class SpecPlacementWarning(NewLevelWarning):
    """Hardware never measured, placed by its GPU specifications (a kind of :class:`NewLevelWarning`)."""


class ExtrapolationWarning(UserWarning):
    """A candidate lies beyond the training data (e.g. more devices than were ever measured)."""


def _posterior_arrays(idata, n_draws: int | None, rng: np.random.Generator) -> dict[str, np.ndarray]:
    from .models.io import sample_array

    post = idata.posterior
    n = post.sizes["chain"] * post.sizes["draw"]
    take = np.arange(n) if n_draws is None or n_draws >= n else np.sort(rng.choice(n, n_draws, replace=False))
    out = {}
    for name, da in post.data_vars.items():
        if name.endswith(("_z", "_free", "_log__")) or name == "log_eta_curve":
            continue
        out[name] = sample_array(da)[take]
    return out


def check_candidates(configs: pd.DataFrame, source: str = "candidates") -> pd.DataFrame:
    """Validate a candidate table and give it canonical types (pre-run columns only).

    The rules are :func:`bayes_energy.schema.validate_configs`'s; post-run
    columns (:data:`~bayes_energy.schema.POST_RUN`) are dropped.
    """
    if not isinstance(configs, pd.DataFrame):
        raise SchemaError(f"{source}: expected a pandas DataFrame, got {type(configs).__name__}")
    df = configs.drop(columns=[c for c in POST_RUN if c in configs.columns]).reset_index(drop=True)
    return validate_configs(df, source=source)


def _warn_extrapolation(train: pd.DataFrame | None, cands: pd.DataFrame) -> None:
    """Warn when candidates use more devices than any training run of their strategy."""
    if train is None:
        return
    most = train.groupby("strategy")["n_gpus"].max().astype(int).to_dict()
    far = [(i, s, n) for i, (s, n) in enumerate(zip(cands["strategy"], cands["n_gpus"].astype(int)))
           if s != "single" and s in most and n > most[s]]
    if far:
        i, s, n = max(far, key=lambda t: t[2])
        warnings.warn(f"{len(far)} candidate(s) use more devices than the training data's {s} runs (up to "
                      f"{most[s]}), e.g. row {i + 2}: n_gpus {n}; the speedup curves are extrapolated there",
                      ExtrapolationWarning, stacklevel=4)


def _extend(P: dict, name: str, n_new: int, centre, scale, rng, axis: int) -> None:
    """Append ``n_new`` population draws along ``axis`` of parameter ``name``."""
    if n_new == 0 or name not in P:
        return
    arr = P[name]
    shape = list(arr.shape)
    shape[axis] = n_new
    centre = np.broadcast_to(centre, shape) if centre is not None else 0.0
    new = centre + rng.standard_normal(shape) * np.broadcast_to(scale, shape)
    P[name] = np.concatenate([arr, new], axis=axis)


def _new_cell_draws(P: dict, spec: ModelSpec, name: str, labels: list[str], centre, tau, rng) -> np.ndarray:
    """Draws of the cell effect ``name`` (sample, cell, *k) for unseen cells ``labels``: (sample, new cell, *k).

    Without crossing: ``centre + N(0, tau^2)``. Crossed (``{name}_hw`` in the
    posterior): ``centre + a_h + b_f + N(0, s_cell tau^2)`` with the posterior
    draws of a known hardware's or family's effect, and one population draw
    per new hardware or family, shared by all its cells.
    """
    S, k = P[name].shape[0], P[name].shape[2:]
    tau = np.broadcast_to(np.asarray(tau, float), k)
    if f"{name}_hw" not in P:
        return centre + rng.standard_normal((S, len(labels), *k)) * tau
    s_hw, s_fam, s_cell = spec.config["priors"]["cell_shares"]
    out = centre + rng.standard_normal((S, len(labels), *k)) * tau * np.sqrt(s_cell)
    for dim, suffix, share, pos in (("hardware", "_hw", s_hw, 0), ("family", "_fam", s_fam, 1)):
        known = {v: i for i, v in enumerate(spec.config["levels"][dim])}
        fresh: dict[str, np.ndarray] = {}
        for j, label in enumerate(labels):
            level = label.rsplit("|", 1)[pos]
            if level in known:
                out[:, j] += P[name + suffix][:, known[level]]
            else:
                out[:, j] += fresh.setdefault(level, rng.standard_normal((S, *k)) * tau * np.sqrt(share))
    return out


def placement(spec: ModelSpec, new_cells: list[str], measured: list[str] | None = None) -> dict[str, tuple[int, float, float]]:
    r"""New cells that can be placed by their GPU's specifications: label -> (donor cell, dh_energy, dh_time).

    A new hardware x family cell is placed when its hardware is in the GPU
    table (:func:`bayes_energy.hardware.roofline`), its family was measured
    on some hardware that is in the table too, and the model's config has
    ``spec_placement``. The spec-sheet scales are
    :math:`h_E = w\ln(\mathrm{TDP}/F) + (1-w)\ln(\mathrm{TDP}/B)` (J per
    FLOP and per byte at TDP and peak) and :math:`h_T = -w\ln F - (1-w)\ln B`,
    with peak dense 16-bit FLOP/s :math:`F`, memory bandwidth :math:`B` and
    :math:`w` = ``priors.hw_compute_share``. The donor is the family's
    measured cell whose hardware is closest in :math:`h_E`; ``measured``
    lists the cells with training rows (default: every cell of the fit).
    """
    if not spec.config.get("spec_placement") or not new_cells:
        return {}
    from .hardware import roofline

    w = float(spec.config["priors"]["hw_compute_share"])
    known = list(spec.config["levels"]["cell"])
    measured = set(known if measured is None else measured)
    pairs = [c.rsplit("|", 1) for c in known + new_cells]
    rf = roofline(sorted({h for h, _ in pairs}), unknown="nan")
    h_e = w * rf["log_j_per_flop"] + (1 - w) * rf["log_j_per_byte"]
    h_t = -(w * np.log(rf["peak_flop_per_s"]) + (1 - w) * np.log(rf["mem_bandwidth_byte_per_s"]))
    out = {}
    for label in new_cells:
        hw, fam = label.rsplit("|", 1)
        if not np.isfinite(h_e.get(hw, np.nan)):
            continue
        donors = [(abs(h_e[c.rsplit("|", 1)[0]] - h_e[hw]), i) for i, c in enumerate(known)
                  if c in measured and c != label and c.rsplit("|", 1)[1] == fam
                  and np.isfinite(h_e.get(c.rsplit("|", 1)[0], np.nan))]
        if donors:
            i = min(donors)[1]
            dh = known[i].rsplit("|", 1)[0]
            out[label] = (i, float(h_e[hw] - h_e[dh]), float(h_t[hw] - h_t[dh]))
    return out


def place_by_specs(P: dict, spec: ModelSpec, targets: dict[str, int], placed: dict[str, tuple[int, float, float]],
                   rng) -> list[str]:
    r"""Give unmeasured cells that the GPU table can place their donor's draws and a roofline shift; return their labels.

    ``placed`` is :func:`placement`'s answer for these cells. ``targets`` maps each cell label to its position on the cell axis of
    ``P``: new cells appended by :func:`_add_new_levels`, or cells of the
    fit's level lists that had no training rows (prior-only, e.g. a
    cross-validation fold without that GPU).

    A GPU never measured, with a family that was measured on another GPU
    (the donor, :func:`placement`), gets the donor cell's law, strategy
    effects and speedup-curve slopes, and curve levels
    :math:`\theta_{new} = \theta_d + \mathcal N(0, \text{hw\_tau\_curve}^2)`
    (the table has no interconnect, so the curves move by a between-cell
    scale). Each run's expected energy and time then move by the roofline
    with a fixed per-step overhead (:func:`bayes_energy.models.predictive.spec_shift`):
    the work-bound share :math:`f` of the run's donor time scales by the spec
    ratios :math:`e^{\lambda_E \Delta h_E}` and :math:`e^{\lambda_T \Delta h_T}`, the rest not at all,

    .. math::

        \Delta\ln E_r = \ln\big(f_r e^{\lambda_E\Delta h_E} + 1 - f_r\big) + r_E,

    :math:`\lambda \sim \mathcal N(1, \text{hw\_lambda\_sd}^2)`,
    :math:`r \sim \mathcal N(0, \text{hw\_tau}^2)`, one draw per posterior
    draw and cell (shared by the cell's runs). With two GPU types in the
    public data neither :math:`\lambda` nor the overhead can be learned across
    GPUs; they are physics priors (see ``pooled.PRIORS``).
    """
    if not placed:
        return []
    from .hardware import roofline
    from .models.predictive import PLACED

    pri = spec.config["priors"]
    S, ncell = P["E_beta"].shape[:2]
    _pad_placement(P, ncell)
    known = list(spec.config["levels"]["cell"])
    for label, k in targets.items():
        if label not in placed:
            continue
        d, dh_e, dh_t = placed[label]
        peak = float(roofline(known[d].rsplit("|", 1)[0])["peak_flop_per_s"].iloc[0])
        P[PLACED][:, k] = np.log(pri["hw_peak_utilisation"] * peak)
        for b, dh in (("E", dh_e), ("T", dh_t)):
            P[f"{b}_beta"][:, k] = P[f"{b}_beta"][:, d]
            P[f"place_work_{b}"][:, k] = (1.0 + pri["hw_lambda_sd"] * rng.standard_normal(S)) * dh
            P[f"place_stray_{b}"][:, k] = pri["hw_tau"] * rng.standard_normal(S)
            if f"{b}_psi_cell" in P:
                P[f"{b}_psi_cell"][:, k] = P[f"{b}_psi_cell"][:, d]
        P["curve_cell"][:, k] = P["curve_cell"][:, d] + pri["hw_tau_curve"] * rng.standard_normal(
            P["curve_cell"][:, d].shape)
        if "curve_beta_cell" in P and P["curve_beta"].ndim == 4:
            P["curve_beta"][:, k] = P["curve_beta"][:, d]
    return [c for c in targets if c in placed]


def _pad_placement(P: dict, ncell: int) -> None:
    """Make the placement arrays (sample, cell) span ``ncell`` cells: NaN rate / zero shift for cells not placed."""
    from .models.predictive import PLACED

    S = P["E_beta"].shape[0]
    for key, fill in ((PLACED, np.nan), ("place_work_E", 0.0), ("place_work_T", 0.0),
                      ("place_stray_E", 0.0), ("place_stray_T", 0.0)):
        have = P[key].shape[1] if key in P else 0
        if have < ncell:
            pad = np.full((S, ncell - have), fill)
            P[key] = pad if key not in P else np.concatenate([P[key], pad], axis=1)


def _add_new_levels(P: dict, spec: ModelSpec, A: dict, configs: pd.DataFrame, rng,
                    measured: list[str] | None = None) -> None:
    ncell = len(spec.coords["cell"])
    known = list(spec.coords["cell"])
    if measured is not None and spec.config.get("spec_placement"):
        # cells of the fit's levels without training rows (prior-only): placed by specs where possible
        used = sorted({known[i] for i in np.unique(A["cell_idx"]) if i < ncell} - set(measured))
        done = place_by_specs(P, spec, {c: known.index(c) for c in used}, placement(spec, used, measured), rng)
        if done:
            warnings.warn(f"hardware x family {', '.join(done)} has no training rows: placed by the GPU's "
                          "specifications (roofline) from the same family on measured hardware (wider intervals)",
                          SpecPlacementWarning, stacklevel=5)
    n_new_cells = int(max(A["cell_idx"].max() + 1 - ncell, 0))
    if n_new_cells:
        new = sorted(set(cell_labels(configs)[A["cell_idx"] >= ncell]))  # the order of their codes
        if spec.config["pooling"] != "partial":
            raise ValueError(
                f"the {spec.name} model has no population distribution for unseen hardware x family cells "
                f"({', '.join(new)}); fit the hierarchical model to predict them"
            )
        placed = placement(spec, new, measured)
        by_specs = set(placed)
        rest = [c for c in new if c not in by_specs]
        if by_specs:
            warnings.warn(f"hardware x family {', '.join(sorted(by_specs))} not in the training data: placed by the "
                          "GPU's specifications (roofline) from the same family on measured hardware (wider intervals)",
                          SpecPlacementWarning, stacklevel=5)
        how = ("from the effects of its hardware and of its family where they were measured, else from their "
               "population" if "E_beta_hw" in P else "from the population distribution of cells")
        if rest:
            warnings.warn(f"hardware x family {', '.join(rest)} not in the training data: predicted {how} (wider "
                          "intervals)", NewLevelWarning, stacklevel=5)  # the caller of predict()
        pri = spec.config["priors"]
        for b in ("E", "T"):
            tau = by_coef(pri["tau_coef"], spec.coords["coef"])
            draws = _new_cell_draws(P, spec, f"{b}_beta", new, P[f"{b}_mu"][:, None, :], tau, rng)
            P[f"{b}_beta"] = np.concatenate([P[f"{b}_beta"], draws], axis=1)
            if f"{b}_psi_cell" in P:
                psi = P[f"{b}_psi_cell"]  # (sample, cell, strategy); single stays the reference (0)
                dev = _new_cell_draws(P, spec, f"{b}_psi_cell_dev", new, 0.0, pri["tau_psi"], rng)
                dev = np.concatenate([np.zeros(dev.shape[:2] + (1,)), dev], axis=2)
                P[f"{b}_psi_cell"] = np.concatenate([psi, dev], axis=1)
        draws = _new_cell_draws(P, spec, "curve_cell", new, P["curve_mu"][:, None, :], pri["tau_curve"], rng)
        P["curve_cell"] = np.concatenate([P["curve_cell"], draws], axis=1)
        if "curve_beta_cell" in P:  # covariate slopes per cell, around the population's
            main = P["curve_beta_main"]  # (sample, curve_coef, curve_main)
            slopes = _new_cell_draws(P, spec, "curve_beta_cell", new, main[:, None], pri["tau_curve_beta"], rng)
            full = np.zeros(slopes.shape[:3] + (P["curve_beta"].shape[-1],))
            full[..., spec.curve_moved_index] = slopes  # the parameters they move (build.build_model)
            P["curve_beta"] = np.concatenate([P["curve_beta"], full], axis=1)
        place_by_specs(P, spec, {c: ncell + j for j, c in enumerate(new)}, placed, rng)
    if "place_log_rate" in P:  # cells appended after a first placement: not placed
        _pad_placement(P, P["E_beta"].shape[1])
    if "group_idx" in A and "E_u" in P:
        ngroup = P["E_u"].shape[1]
        n_new = int(max(A["group_idx"].max() + 1 - ngroup, 0))
        _extend(P, "E_u", n_new, None, P["E_u_tau"][:, None], rng, axis=1)


def _group_codes(spec: ModelSpec, configs: pd.DataFrame) -> np.ndarray | None:
    """Group codes; unseen configuration families get new codes, one per family."""
    if not spec.config.get("group_effects"):
        return None
    known = {g: i for i, g in enumerate(spec.config["levels"]["group"])}
    codes, uniques = pd.factorize(group_keys(configs))
    lookup = np.array([known.get(u, -1) for u in uniques])
    new_rank = np.cumsum(lookup < 0) - 1
    mapped = np.where(lookup >= 0, lookup, len(known) + new_rank)
    return mapped[codes].astype("int64")


@dataclass
class _Prepared:
    """A posterior and a candidate table made ready for chunked evaluation.

    Candidates are sorted by cell and curve (``order`` maps back), so that
    each chunk's cells and curves are contiguous column ranges. Arrays are
    float32: the heavy (sample x candidate) work is memory-bound, and
    float32 carries log energies to ~1e-6, far below the posterior spread.
    """

    P: dict
    A: dict
    order: np.ndarray
    eff: np.ndarray | None
    pools: dict
    centre: dict
    residual: bool
    S: int
    n: int
    width: int
    seeds: list


def design_and_posterior(idata, configs: pd.DataFrame, n_draws: int | None,
                         rng: np.random.Generator) -> tuple[ModelSpec, dict, dict]:
    """The spec, the candidates' design arrays and the posterior draws (sample, ...), new levels added.

    Unseen cells and configuration families get population draws (with a
    :class:`NewLevelWarning`). Everything that evaluates the law on a
    posterior starts here: :func:`predict_draws`, :func:`predict` and the
    validation harness's exact predictive densities.
    """
    from .models.io import posterior_of

    post = posterior_of(idata)
    spec = post.spec
    cands = check_candidates(configs)
    if "group" in configs.columns:
        cands["group"] = configs["group"].to_numpy()
    train = post.table
    _warn_extrapolation(train, cands)
    A = spec.arrays(cands, allow_new=True)
    groups = _group_codes(spec, cands)
    if groups is not None:
        A["group_idx"] = groups
    P = _posterior_arrays(post.idata, n_draws, rng)
    measured = None if train is None else sorted(set(cell_labels(train)))
    _add_new_levels(P, spec, A, cands, rng, measured=measured)
    return spec, A, P


def _prepare(idata, configs: pd.DataFrame, mode: str, n_draws: int | None, seed: int | None,
             residual: bool) -> _Prepared:
    if mode not in ("pre", "post"):
        raise ValueError(f"mode must be 'pre' or 'post', got {mode!r}")
    rng = np.random.default_rng(seed)
    eff = configs["efficiency"].to_numpy(float) if (mode == "post" and "efficiency" in configs.columns) else None
    spec, A, P = design_and_posterior(idata, configs, n_draws, rng)
    P = {k: v.astype(_DTYPE) for k, v in P.items()}
    n = len(configs)
    order = np.lexsort((A["curve"], A["cell_idx"]))
    A = {k: v[order] for k, v in A.items() if isinstance(v, np.ndarray) and v.shape[:1] == (n,) and k != "cell_onehot"}
    A["X"], A["Z"] = A["X"].astype(_DTYPE), A["Z"].astype(_DTYPE)
    S = P["E_sigma"].shape[0]
    # Residual noise: each posterior draw s gets a pool of iid variates from its own
    # distribution (Student-t with nu_s, or standard normal); every candidate of a chunk takes
    # a different pool column. Each candidate's predictive draws are exactly distributed;
    # candidates in different chunks may share a column (their residuals are then equal),
    # which leaves every candidate's own distribution unchanged.
    width = max(1, int(min(_CHUNK_ELEMENTS // S, n)))
    cols = min(2 * width, n)  # a chunk takes a window of `width` columns at a random offset
    pools = {kind: standard_variates(P, kind, rng, cols, _DTYPE) for kind in ("E", "T", "eta")}  # (sample, pool column)
    n_chunks = -(-n // width)
    seeds = np.random.SeedSequence(int(rng.integers(2**63))).spawn(n_chunks)
    return _Prepared(P=P, A=A, order=order, eff=None if eff is None else eff[order], pools=pools,
                     centre=spec.config["centre"], residual=residual, S=S, n=n, width=width, seeds=seeds)


def _chunk_draws(st: _Prepared, i: int) -> tuple[slice, dict[str, np.ndarray]]:
    """Draws of chunk ``i`` (sorted candidate order): ``log_energy_j``, ``log_time_s``, ``log_eta``, (sample, run)."""
    sl = slice(i * st.width, min((i + 1) * st.width, st.n))
    rng = np.random.default_rng(st.seeds[i])
    P = st.P
    a = {k: v[sl] for k, v in st.A.items()}

    def noise(kind, cols):
        # a window of distinct pool columns at a random offset: a view, no copy
        start = int(rng.integers(0, st.pools[kind].shape[1] - cols + 1))
        return st.pools[kind][:, start:start + cols]

    log_eta = log_eta_draws(P, a, noise if st.residual else None, None if st.eff is None else st.eff[sl])
    log_e, log_t = energy_time_draws(P, a, log_eta, st.centre, noise if st.residual else None)
    return sl, {"log_energy_j": log_e, "log_time_s": log_t, "log_eta": log_eta}


def _map_chunks(st: _Prepared, fn) -> None:
    """Call ``fn(sorted_slice, draws)`` for every chunk, on up to :func:`bayes_energy.threads` threads.

    numpy releases the GIL in the array work, so threads share it out; every
    chunk has its own random stream, so results do not depend on the thread count.
    """
    chunks = range(len(st.seeds))
    workers = min(threads(), len(chunks))
    if workers <= 1:
        for i in chunks:
            fn(*_chunk_draws(st, i))
        return
    from threadpoolctl import threadpool_limits

    # one BLAS thread per worker: BLAS's own threads on top of ours oversubscribe the cores
    # (measured: 2.2 s instead of 1.2 s for 10k candidates x 4000 draws on 2 cores)
    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(workers) as pool:
        for _ in pool.map(lambda i: fn(*_chunk_draws(st, i)), chunks):
            pass


def predict_draws(idata, configs: pd.DataFrame, mode: str = "pre", n_draws: int | None = None,
                  seed: int | None = None, residual: bool = True) -> dict[str, np.ndarray]:
    """Posterior-predictive draws of log energy, log time and log efficiency.

    Parameters
    ----------
    idata : arviz.InferenceData or bayes_energy.models.io.Posterior
        A posterior written by :func:`bayes_energy.models.sample.fit`.
    configs : pandas.DataFrame
        Candidate runs with :data:`PRE_RUN_COLUMNS` (extra columns ignored).
    mode : {"pre", "post"}
        ``pre`` draws the efficiency from the speedup curves; ``post`` uses
        a measured ``efficiency`` column where one is given.
    n_draws : int, optional
        Thin the posterior to this many draws.
    seed : int, optional
    residual : bool, default True
        Add the residual noise and the efficiency scatter (posterior-predictive
        draws). False gives draws of the expected outcome (the posterior of the
        mean), whose spread is the model's uncertainty alone.

    Returns
    -------
    dict
        ``log_energy_j``, ``log_time_s`` and ``log_eta``, each (sample,
        candidate), float64 (computed in float32).
    """
    st = _prepare(idata, configs, mode, n_draws, seed, residual)
    out = _empty_draws(st)
    _map_chunks(st, lambda sl, chunk: _store(out, st.order[sl], chunk))
    return out


def _empty_draws(st: _Prepared) -> dict[str, np.ndarray]:
    return {k: np.empty((st.S, st.n)) for k in ("log_energy_j", "log_time_s", "log_eta")}


def _store(out: dict[str, np.ndarray], cols: np.ndarray, chunk: dict[str, np.ndarray]) -> None:
    """Write a chunk's draws into the (sample, candidate) arrays, in the caller's candidate order."""
    for k, v in chunk.items():
        out[k][:, cols] = v


def _order_stats(rows: np.ndarray, ks: list[int]) -> None:
    """Partition each row in place so that positions ``ks`` (sorted) hold their order statistics.

    One partition at the middle ``k``, then each side on its own: three
    single-``k`` partitions are several times faster than numpy's multi-``k`` one.
    """
    if not ks:
        return
    mid = len(ks) // 2
    k = ks[mid]
    rows.partition(k, axis=-1)
    _order_stats(rows[:, :k], ks[:mid])
    right = rows[:, k + 1:]
    _order_stats(right, [j - k - 1 for j in ks[mid + 1:]])


def _summary(rows: np.ndarray, prob: float, log: bool) -> tuple[np.ndarray, ...]:
    """(mean, median, lo, hi) of each row (one candidate's draws per row; partitioned in place)."""
    S = rows.shape[1]
    k = [int(np.floor((1 - prob) / 2 * (S - 1))), (S - 1) // 2, int(np.ceil((1 + prob) / 2 * (S - 1)))]
    with np.errstate(over="ignore"):  # a far Student-t tail draw can overflow: the mean is then inf
        mean = np.exp(rows, dtype=np.float64).mean(axis=1) if log else rows.mean(axis=1, dtype=np.float64)
    _order_stats(rows, sorted(set(k)))
    lo, med, hi = (rows[:, j].astype(np.float64) for j in k)
    if log:
        lo, med, hi = np.exp(lo), np.exp(med), np.exp(hi)
    return mean, med, lo, hi


def summarize_draws(draws: np.ndarray, prob: float, prefix: str, log: bool = False, scale: float = 1.0) -> pd.DataFrame:
    """Mean, median and central ``prob`` interval of each column of ``draws``.

    With ``log=True`` the draws are logarithms: order statistics are taken on
    the log scale (exactly those of the exponentiated draws) and only the mean
    needs the exponential. ``scale`` multiplies the result (e.g. J -> kWh).
    """
    rows = np.array(draws.T, order="C")  # one candidate per row, a copy: partitioned in place
    stats = _summary(rows, prob, log)
    return pd.DataFrame({f"{prefix}_{name}": v * scale for name, v in zip(("mean", "median", "lo", "hi"), stats)})


def predict(idata, configs: pd.DataFrame, prob: float = DEFAULT_PROB, mode: str = "pre",
            n_draws: int | None = None, seed: int | None = None, return_draws: bool = False):
    """Predictive distribution of energy (J and kWh) and time for candidate runs.

    Parameters
    ----------
    idata : arviz.InferenceData or bayes_energy.models.io.Posterior
        A fitted posterior (``posterior.nc``).
    configs : pandas.DataFrame
        Candidates: :data:`PRE_RUN_COLUMNS`; extra columns are kept in the
        output but not used; post-run columns (``time_s``, ``energy_j``,
        ``speedup``, ``efficiency``) are ignored before the run.
    prob : float, default 0.9
        Central interval probability.
    mode : {"pre", "post"}
    n_draws, seed
        See :func:`predict_draws`.
    return_draws : bool
        Also return the draws dict.

    Returns
    -------
    pandas.DataFrame
        The candidates with ``energy_j_*``, ``energy_kwh_*`` and ``time_s_*``
        columns (``mean``, ``median``, ``lo``, ``hi``) and ``prob``. ``_mean``
        is the Monte Carlo mean over the draws. The Student-t residual on the
        log scale gives the energy itself no finite expectation, so the mean
        is sensitive to a few extreme draws: prefer the median and the
        interval, as :func:`bayes_energy.plan.plan` does.

    Examples
    --------
    >>> import bayes_energy as be  # doctest: +SKIP
    >>> be.predict(idata, candidates, prob=0.9)[["energy_kwh_lo", "energy_kwh_hi"]]  # doctest: +SKIP
    """
    if not 0 < prob < 1:
        raise ValueError(f"prob must lie in (0, 1), got {prob}")
    st = _prepare(idata, configs, mode, n_draws, seed, residual=True)
    names = ("mean", "median", "lo", "hi")
    stats = {f"{q}_{name}": np.empty(st.n) for q in ("energy_j", "time_s") for name in names}
    draws = _empty_draws(st) if return_draws else None

    def summarise(sl, chunk):
        cols = st.order[sl]
        if draws is not None:
            _store(draws, cols, chunk)
        for q, key in (("energy_j", "log_energy_j"), ("time_s", "log_time_s")):
            rows = np.ascontiguousarray(chunk[key].T)  # one candidate per row
            for name, v in zip(names, _summary(rows, prob, log=True)):
                stats[f"{q}_{name}"][cols] = v

    _map_chunks(st, summarise)
    energy = pd.DataFrame({k: v for k, v in stats.items() if k.startswith("energy_j")})
    kwh = energy.rename(columns=lambda col: col.replace("energy_j", "energy_kwh")) / KWH_TO_J
    time = pd.DataFrame({k: v for k, v in stats.items() if k.startswith("time_s")})
    out = pd.concat([configs.reset_index(drop=True), energy, kwh, time], axis=1)
    out["prob"] = prob
    return (out, draws) if return_draws else out


def unknown_hardware(idata, hardware, source: str = "candidates") -> str:
    """A one-line message when ``hardware`` names types the fit never saw ('' when all are known).

    Close matches among the known names are suggested.
    """
    import difflib

    from .models.io import posterior_of

    spec = posterior_of(idata).spec
    known = list(spec.config["levels"]["hardware"])
    new = sorted(set(map(str, hardware)) - set(known))
    if spec.config.get("spec_placement"):
        from .hardware import match_gpu

        new = [h for h in new if match_gpu(h) is None]  # in the GPU table: placed by its specifications
    if not new:
        return ""
    hints = []
    for name in new:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.3) or [k for k in known if name.lower() in k.lower()]
        hints.append(f"{name!r}" + (f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""))
    return (f"{source}: hardware {', '.join(hints)} is neither in the fit, which knows {', '.join(map(repr, known))}, "
            "nor in the GPU table (bayes_energy/data/gpu_specs.csv); pass --allow-unknown-hardware to predict it "
            "from the population of hardware (wide intervals)")


def main(argv: list[str] | None = None) -> int:
    """``python -m bayes_energy.predict``; returns the exit status (2 on bad input)."""
    from .cli import OutputError, Parser, check_output_file, fail, plain_warnings, probability, write_file
    from .datasets import read_csv

    parser = Parser(prog="python -m bayes_energy.predict", description=__doc__.split("\n\n")[0])
    parser.add_argument("--posterior", required=True, help="posterior.nc written by bayes_energy.fit")
    parser.add_argument("--configs", required=True, help="CSV of candidate runs")
    parser.add_argument("--out", required=True, help="CSV to write (an existing file only with --overwrite)")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    parser.add_argument("--prob", type=probability, default=DEFAULT_PROB, help="central interval probability (default %(default)s)")
    parser.add_argument("--mode", choices=("pre", "post"), default="pre")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--allow-unknown-hardware", action="store_true",
                        help="predict hardware the fit never saw from the population of hardware (wide intervals)")
    from .carbon import add_site_arguments, sites_from_args, with_carbon

    add_site_arguments(parser)  # --region / --grid-gco2-per-kwh, --pue, --price-per-kwh: CO2e and cost columns
    args = parser.parse_args(argv)
    plain_warnings()
    from .models.io import PosteriorFileError, load

    try:
        sites = sites_from_args(args)
        out = check_output_file(args.out, overwrite=args.overwrite)
        configs = read_csv(args.configs, what="candidate table")
        configs = check_candidates(configs, source=args.configs).assign(
            **{c: configs[c].to_numpy() for c in configs.columns if c in POST_RUN})
        idata = load(args.posterior)
        msg = unknown_hardware(idata, configs["hardware"], source=args.configs)
        if msg and not args.allow_unknown_hardware:
            return fail(msg)
        with warnings.catch_warnings():
            warnings.simplefilter("always", NewLevelWarning)
            if sites:  # CO2e and cost from the same energy draws
                table, draws = predict(idata, configs, prob=args.prob, mode=args.mode, seed=args.seed, return_draws=True)
                table = with_carbon(table, draws, sites[0], prob=args.prob, seed=args.seed)
            else:
                table = predict(idata, configs, prob=args.prob, mode=args.mode, seed=args.seed)
        write_file(out, lambda tmp: table.to_csv(tmp, index=False))
    except (SchemaError, PosteriorFileError, OutputError, ValueError, FileNotFoundError) as err:
        return fail(err)
    print(f"wrote {len(table)} predictions to {out}")
    if sites:
        from .carbon import ANNUAL_AVERAGE_NOTE

        pct = f"{args.prob:.0%}"
        cols = [c for c in ("co2e_kg", "cost") if f"{c}_median" in table.columns]
        print(f"co2e_kg_* and cost_* columns (median and central {pct} interval) at {sites[0].describe(args.prob)}")
        print(f"note: {ANNUAL_AVERAGE_NOTE}")
        for _, r in table.head(5).iterrows():
            print(f"  {r['strategy']} x{r['n_gpus']} {r['hardware']}: energy {r['energy_kwh_median']:.4g} kWh "
                  f"({r['energy_kwh_lo']:.4g}-{r['energy_kwh_hi']:.4g})"
                  + "".join(f"; {'CO2e' if c == 'co2e_kg' else 'cost'} {r[c + '_median']:.4g} ({r[c + '_lo']:.4g}-"
                            f"{r[c + '_hi']:.4g}){' kg' if c == 'co2e_kg' else (' ' + args.currency if args.currency else '')}"
                            for c in cols))
        if len(table) > 5:
            print(f"  ... {len(table) - 5} more rows in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
