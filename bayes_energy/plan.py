r"""Plan a fine-tuning run: energy and time of every candidate configuration.

``plan(idata, workload, ...)`` crosses a workload (architecture, sequence
length, batch size, tokens) with candidate hardware, strategies and device
counts, draws the joint posterior-predictive energy and time of every
candidate with :func:`bayes_energy.predict.predict_draws`, and reports for
each

* the energy and time intervals (central ``prob`` interval, default 0.9),
* :math:`P(T \le \text{deadline})` and :math:`P(E \le \text{budget})`,
* the median power :math:`E/T` (faster configurations often draw more),
* :math:`P(E < E_{1})`, the probability that it uses less energy than the
  single-device run on the same hardware (more devices can cost more),
* whether it is on the time/energy Pareto front of the posterior-predictive
  medians, and how often it is on the front of a joint draw (``p_pareto``),

and recommends the candidate with the lowest predicted energy among those
that meet the deadline with probability at least ``p``.

"Predicted energy" is the posterior-predictive *median* by default. The
models put Student-t residuals on ln energy and ln time, under which the
predictive *mean* of energy does not exist: its Monte Carlo estimate is
carried by a few tail draws (it can even overflow), so rankings by it are
not reproducible. ``rank_by="mean"`` still gives the literal expected value.

Probabilities come from joint draws: one posterior draw gives every
candidate of the workload its energy and time together (the same law
coefficients, curves and, in a model with configuration-family effects,
the same family effect: ``predict_draws`` gives all candidates of one
workload on one hardware one family code), so comparisons between
candidates carry the posterior's correlations instead of independent
uncertainty.

Command line::

    python -m bayes_energy.plan --posterior fits/default/posterior.nc \
        --arch bert-large --seq-len 128 --batch-size 8 --tokens 8e6 \
        --strategies single fsdp tp --n-gpus 1 2 4 8 \
        --deadline-s 600 --p 0.9 --energy-budget-kwh 0.05 [--out plan.csv]
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import DEFAULT_PROB
from .schema import KWH_TO_J
from .models.spec import CURVE_FEATURES, design_frame
from .schema import SchemaError, STRATEGIES

__all__ = ["ARCHITECTURES", "Workload", "Plan", "plan", "candidates", "evaluate", "evidence", "pareto_front"]

#: Named architectures: family and block sizes (heads are informative only).
ARCHITECTURES: dict[str, dict] = {
    "bert-base": {"family": "bert", "num_layers": 12, "hidden_size": 768, "heads": 12, "ff": 3072},
    "bert-large": {"family": "bert", "num_layers": 24, "hidden_size": 1024, "heads": 16, "ff": 4096},
    "gpt2": {"family": "gpt", "num_layers": 12, "hidden_size": 768, "heads": 12, "ff": 3072},
    "gpt2-medium": {"family": "gpt", "num_layers": 24, "hidden_size": 1024, "heads": 16, "ff": 4096},
}


@dataclass
class Workload:
    """What is to be trained: the architecture and the run's size.

    Parameters
    ----------
    family : str
        Model family, e.g. ``bert`` or ``gpt``.
    num_layers, hidden_size, ff : int
        Depth, width and feed-forward width.
    seq_len, batch_size : int
        Tokens per example and examples per step and process.
    tokens : float
        Tokens the run processes.
    heads : int, optional
        Attention heads (not used by the law; kept for the record).
    grad_accum : int, default 1
    """

    family: str
    num_layers: int
    hidden_size: int
    ff: int
    seq_len: int
    batch_size: int
    tokens: float
    heads: int | None = None
    grad_accum: int = 1

    def __post_init__(self) -> None:
        from .schema import LIMITS

        for name in ("num_layers", "hidden_size", "ff", "seq_len", "batch_size", "grad_accum", "tokens", "heads"):
            v = getattr(self, name)
            if v is None and name == "heads":
                continue
            opt = "--" + name.replace("_", "-")
            try:
                f = float(v)
            except (TypeError, ValueError):
                raise ValueError(f"workload {opt}: expected a positive number, got {v!r}") from None
            lo, hi = LIMITS[name]
            if not np.isfinite(f) or f <= 0 or (name != "tokens" and f != int(f)):
                kind = "a positive number" if name == "tokens" else "a positive whole number"
                raise ValueError(f"workload {opt}: expected {kind}, got {v!r}")
            if not lo <= f <= hi:
                raise ValueError(f"workload {opt}: {f:g} is outside the plausible range {lo:g} to {hi:g}")
        if self.heads is not None and int(self.hidden_size) % int(self.heads):
            raise ValueError(f"workload: --hidden-size {self.hidden_size} is not a multiple of --heads {self.heads}")
        if not str(self.family).strip():
            raise ValueError("workload --family: expected a model family name, got an empty value")

    @classmethod
    def from_architecture(cls, name: str, **size) -> Workload:
        """A workload from a named architecture in :data:`ARCHITECTURES`.

        Examples
        --------
        >>> Workload.from_architecture("bert-large", seq_len=128, batch_size=8, tokens=8e6).num_layers
        24
        """
        if name not in ARCHITECTURES:
            raise ValueError(f"unknown architecture {name!r}; choose one of {', '.join(ARCHITECTURES)}")
        return cls(**(ARCHITECTURES[name] | size))

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("family", "num_layers", "hidden_size", "ff", "seq_len",
                                            "batch_size", "grad_accum", "tokens")}
        if self.heads is not None:
            d["heads"] = self.heads
        return d


def _known_levels(idata, dim: str) -> list[str]:
    from .models.io import posterior_of

    return list(posterior_of(idata).spec.config["levels"][dim])


def resolve_hardware(names: Sequence[str], known: Sequence[str], allow_unknown: bool = False,
                     by_specs: bool = False) -> list[str]:
    """Map short hardware names (``A100``) to the model's levels.

    An exact match wins; otherwise a unique case-insensitive substring match.
    With ``by_specs`` (a fit with ``spec_placement``), a name the fit does
    not know but the GPU table does (:func:`bayes_energy.hardware.lookup`,
    e.g. ``"NVIDIA H100 PCIe"``) maps to its table key: predictions place
    it by its specifications. A name matching nothing raises a ValueError
    that lists the known names (with close matches first), unless
    ``allow_unknown``: then it is kept as it is and the model predicts it
    from its population of hardware, with a warning and wide intervals.
    """
    import difflib

    out = []
    for name in names:
        if name in known:
            out.append(name)
            continue
        hits = [k for k in known if name.lower() in k.lower()]
        if len(hits) > 1:
            raise ValueError(f"hardware {name!r} is ambiguous: it matches {', '.join(hits)}")
        if not hits and by_specs:
            from .hardware import UnknownHardwareError, lookup

            try:
                out.append(str(lookup(name).name))
                continue
            except UnknownHardwareError as err:
                if not allow_unknown:
                    raise ValueError(f"--hardware {name!r} is not in the fit (it knows {', '.join(map(repr, known))}) "
                                     f"and {err}. Pass --allow-unknown-hardware to predict it from the population "
                                     "of hardware (wide intervals)") from None
        if not hits and not allow_unknown:
            close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.3)
            hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
            raise ValueError(f"--hardware {name!r} is not in the fit{hint}; it knows {', '.join(map(repr, known))}. "
                             "Pass --allow-unknown-hardware to predict it from the population of hardware (wide intervals)")
        out.append(hits[0] if hits else name)
    return out


def candidates(workload: Workload | Mapping, strategies: Sequence[str], n_gpus: Sequence[int],
               hardware: Sequence[str], parallel_on_one: bool = False) -> pd.DataFrame:
    """The candidate table: hardware x strategy x device count.

    ``single`` runs on exactly one device; the parallel strategies are
    crossed with the device counts above one (and with 1 too when
    ``parallel_on_one``: a one-process DDP run, say, measures the strategy's
    overhead).

    Returns
    -------
    pandas.DataFrame
        One row per candidate with the workload columns, ``hardware``,
        ``strategy`` and ``n_gpus``.
    """
    if not isinstance(workload, Workload):
        try:
            workload = Workload(**workload)
        except TypeError as err:
            raise ValueError(f"workload: {err}; the keys are those of Workload "
                             "(family, num_layers, hidden_size, ff, seq_len, batch_size, tokens, grad_accum, heads)") from None
    w = workload.as_dict()
    bad = [s for s in strategies if s not in STRATEGIES]
    if bad:
        raise ValueError(f"unknown strategy {', '.join(bad)}; choose from {', '.join(STRATEGIES)}")
    if any(int(n) < 1 for n in n_gpus):
        raise ValueError(f"device counts must be at least 1, got {list(n_gpus)}")
    rows = []
    for hw in hardware:
        for s in strategies:
            lowest = 1 if parallel_on_one else 2
            counts = [1] if s == "single" else sorted({int(n) for n in n_gpus if int(n) >= lowest})
            if s == "single" and 1 not in {int(n) for n in n_gpus}:
                counts = []
            for n in counts:
                rows.append({**w, "hardware": hw, "strategy": s, "n_gpus": n})
    if not rows:
        raise ValueError("no candidates: 'single' needs 1 in the device counts, parallel strategies a count above 1")
    return pd.DataFrame(rows)


#: Evidence label of a cell placed by its GPU's specifications (see :func:`evidence`).
PLACED_BY_SPECS = "new hardware/family: placed by specs"


def evidence(idata, cands: pd.DataFrame) -> list[str]:
    """How close each candidate is to the training data.

    ``measured`` (this hardware, family, strategy and device count were
    run), ``new device count``, ``new strategy here`` (the strategy was never
    run on this hardware x family), ``new hardware/family: placed by specs``
    (:data:`PLACED_BY_SPECS`: this GPU never ran this family, which was
    measured on another GPU; placed by their specifications,
    :func:`bayes_energy.predict.place_by_specs`) or
    ``new hardware/family`` (the cell is predicted from the population of cells). In a measured cell, a workload
    outside the range the cell was measured on adds e.g. ``; beyond data:
    batch 8 < 16, params 5e+08 > 2.8e+08``: the law and the speedup curves
    are then extrapolated in those sizes, and the intervals only partly say so.
    """
    from .models.io import posterior_of
    from .models.spec import cell_labels
    from .predict import placement

    post = posterior_of(idata)
    df = post.table
    if df is None:
        return ["?"] * len(cands)
    new_cells = sorted(set(cell_labels(cands)) - set(cell_labels(df)))
    placed = placement(post.spec, new_cells, sorted(set(cell_labels(df))))
    seen = df.groupby(["hardware", "family", "strategy"])["n_gpus"].agg(lambda s: set(s.astype(int))).to_dict()
    # the workload sizes the speedup curves take as covariates, in logs (the model's own design_frame)
    sizes = design_frame(df)[list(CURVE_FEATURES)]
    ranges = sizes.groupby([df["hardware"].astype(str), df["family"].astype(str)]).agg(["min", "max"])
    wanted = design_frame(cands)[list(CURVE_FEATURES)]
    out = []
    for i, r in enumerate(cands.itertuples()):
        key = (str(r.hardware), str(r.family).lower(), str(r.strategy))
        if key[:2] not in ranges.index:
            placed_here = f"{r.hardware}|{r.family}" in placed
            out.append(PLACED_BY_SPECS if placed_here else "new hardware/family")
            continue
        if key not in seen:
            label = "new strategy here"
        elif int(r.n_gpus) not in seen[key]:
            label = "new device count"
        else:
            label = "measured"
        beyond = []
        for col in CURVE_FEATURES:
            v, lo, hi = wanted[col].iloc[i], ranges.loc[key[:2], (col, "min")], ranges.loc[key[:2], (col, "max")]
            name = col.removeprefix("log_")
            if v < lo - 1e-9:
                beyond.append(f"{name} {np.exp(v):.3g} < {np.exp(lo):.3g}")
            elif v > hi + 1e-9:
                beyond.append(f"{name} {np.exp(v):.3g} > {np.exp(hi):.3g}")
        out.append(label + ("; beyond data: " + ", ".join(beyond) if beyond else ""))
    return out


def pareto_front(time: np.ndarray, energy: np.ndarray) -> np.ndarray:
    """Mask of points no other point beats in both time and energy.

    A point is dominated when another is no worse in both and better in one.
    The last axis indexes the candidates; leading axes (e.g. draws) are
    batched.

    Examples
    --------
    >>> pareto_front(np.array([1.0, 2.0, 3.0]), np.array([3.0, 1.0, 2.0])).tolist()
    [True, True, False]
    """
    t = np.asarray(time, float)[..., :, None]
    e = np.asarray(energy, float)[..., :, None]
    t_o = np.swapaxes(t, -1, -2)
    e_o = np.swapaxes(e, -1, -2)
    dominated = ((t_o <= t) & (e_o <= e) & ((t_o < t) | (e_o < e))).any(axis=-1)
    return ~dominated


@dataclass
class Plan:
    """The result of :func:`plan`.

    Attributes
    ----------
    table : pandas.DataFrame
        One row per candidate (see :func:`evaluate` for the columns).
    recommended : int or None
        Row label in ``table`` of the recommended candidate, None when no
        candidate meets the deadline with probability ``p``.
    draws : dict
        ``energy_j`` and ``time_s`` draws, each (sample, candidate).
    deadline_s, p, energy_budget_j, prob, rank_by
        The settings used.
    notes : list of str
        Plain-language remarks (no feasible candidate, budget at risk, ...).
    objective : {"energy", "co2e", "cost"}
        What the recommendation minimises and the Pareto front weighs
        against time (``draws`` then also holds ``co2e_kg`` and/or ``cost``).
    co2_budget_kg, cost_budget : float, optional
        Budgets reported as ``p_co2_budget`` and ``p_cost_budget``.
    currency : str
        Label of the cost's currency.
    sites : list of str
        One line per site (region, PUE, price and their sources).
    """

    table: pd.DataFrame
    recommended: int | None
    draws: dict = field(repr=False)
    deadline_s: float | None = None
    p: float = 0.9
    energy_budget_j: float | None = None
    prob: float = DEFAULT_PROB
    rank_by: str = "median"
    notes: list = field(default_factory=list)
    objective: str = "energy"
    co2_budget_kg: float | None = None
    cost_budget: float | None = None
    currency: str = ""
    sites: list = field(default_factory=list)

    @property
    def recommendation(self) -> pd.Series | None:
        """The recommended candidate's row, or None."""
        return None if self.recommended is None else self.table.loc[self.recommended]

    @property
    def pareto(self) -> pd.DataFrame:
        """The candidates on the time/energy Pareto front, fastest first."""
        return self.table[self.table["pareto"]].sort_values(f"time_s_{self.rank_by}")

    def to_frame(self) -> pd.DataFrame:
        """A compact, readable table: one row per candidate, kJ and minutes."""
        t = self.table
        pct = int(round(self.prob * 100))
        st = self.rank_by
        out = pd.DataFrame({
            "hardware": t["hardware"], "strategy": t["strategy"], "n_gpus": t["n_gpus"],
            f"energy_kj_{st}": t[f"energy_j_{st}"] / 1e3,
            f"energy_kj_{pct}%": [f"{lo / 1e3:.4g}–{hi / 1e3:.4g}" for lo, hi in zip(t["energy_j_lo"], t["energy_j_hi"])],
            f"time_min_{st}": t[f"time_s_{st}"] / 60,
            f"time_min_{pct}%": [f"{lo / 60:.4g}–{hi / 60:.4g}" for lo, hi in zip(t["time_s_lo"], t["time_s_hi"])],
            "power_w": t["power_w_median"],
        })
        if "region" in t.columns:
            out.insert(3, "region", t["region"])
        for q, name in (("co2e_kg", "co2e_kg"), ("cost", f"cost_{self.currency}" if self.currency else "cost")):
            if f"{q}_median" in t.columns:
                out[f"{name}_{st}"] = t[f"{q}_{st}"]
                out[f"{name}_{pct}%"] = [f"{lo:.3g}–{hi:.3g}" for lo, hi in zip(t[f"{q}_lo"], t[f"{q}_hi"])]
        for col in ("p_deadline", "p_budget", "p_co2_budget", "p_cost_budget", "p_energy_below_single"):
            if col in t.columns:
                out[col] = t[col]
        out["pareto"] = t["pareto"]
        if "evidence" in t.columns:
            out["evidence"] = t["evidence"]
        out["recommended"] = t["recommended"]
        return out

    def to_text(self) -> str:
        """The plan as plain text: the table, the recommendation, the Pareto set."""
        lines = []
        cond = []
        if self.deadline_s is not None:
            cond.append(f"deadline {self.deadline_s:.6g} s with probability >= {self.p:g}")
        if self.energy_budget_j is not None:
            cond.append(f"energy budget {self.energy_budget_j:.6g} J ({self.energy_budget_j / KWH_TO_J:.4g} kWh)")
        if self.co2_budget_kg is not None:
            cond.append(f"CO2e budget {self.co2_budget_kg:.6g} kg")
        if self.cost_budget is not None:
            cond.append(f"cost budget {self.cost_budget:.6g}{' ' + self.currency if self.currency else ''}")
        lines.append(f"{len(self.table)} candidates" + (f"; {'; '.join(cond)}" if cond else ""))
        lines.append(f"intervals: central {self.prob:g}; probabilities from joint posterior-predictive draws")
        if self.sites:
            from .carbon import ANNUAL_AVERAGE_NOTE

            lines.append("CO2e = energy x PUE x grid intensity; cost = energy x PUE x price. Sites:")
            lines += [f"  {s}" for s in self.sites]
            lines.append(f"  note: {ANNUAL_AVERAGE_NOTE}")
        with pd.option_context("display.width", 200, "display.max_columns", 30):
            lines.append(self.to_frame().to_string(index=False, float_format=lambda v: f"{v:.3g}"))
        lines.append(self.verdict())
        return "\n".join(lines)

    def verdict(self) -> str:
        """The recommendation, the Pareto set and the notes, in plain text (no table)."""
        lines = []
        rec = self.recommendation
        st = self.rank_by
        obj = _OBJECTIVE_WORDS[self.objective]
        if rec is not None:
            what = f"lowest expected {obj}" if st == "mean" else f"lowest median {obj}"
            among = "among candidates meeting the deadline" if self.deadline_s is not None else "among all candidates"
            extra = "".join(
                f", {word} {rec[f'{q}_{st}']:.4g}{unit} ({st}; {rec[f'{q}_lo']:.4g}–{rec[f'{q}_hi']:.4g})"
                for q, word, unit in (("co2e_kg", "CO2e", " kg"), ("cost", "cost", f" {self.currency}" if self.currency else ""))
                if f"{q}_median" in self.table.columns)
            lines.append(
                f"recommended ({what} {among}): {_describe(rec)}: "
                f"energy {rec[f'energy_j_{st}'] / 1e3:.4g} kJ ({st}; {rec['energy_j_lo'] / 1e3:.4g}–{rec['energy_j_hi'] / 1e3:.4g}), "
                f"time {rec[f'time_s_{st}']:.4g} s ({st}; {rec['time_s_lo']:.4g}–{rec['time_s_hi']:.4g})" + extra
            )
        else:
            lines.append("recommended: none")
        front = self.pareto
        key = _OBJECTIVE_COLUMNS[self.objective]

        def value(r):
            if self.objective == "energy":
                return f"{r[f'energy_j_{st}'] / 1e3:.4g} kJ"
            return f"{r[f'{key}_{st}']:.4g}" + (" kg CO2e" if self.objective == "co2e" else f" {self.currency}".rstrip())

        lines.append(f"Pareto set ({st} time vs {st} {obj}, fastest first): " + "; ".join(
            f"{r['strategy']} x{int(r['n_gpus'])} {r['hardware']}{' in ' + str(r['region']) if 'region' in r else ''} "
            f"({r[f'time_s_{st}']:.4g} s, {value(r)})" for _, r in front.iterrows()))
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()


def _describe(row: pd.Series) -> str:
    where = f" in {row['region']}" if "region" in row.index else ""
    return f"{row['strategy']} on {int(row['n_gpus'])} x {row['hardware']}{where}"


#: What a plan can rank and budget by: the column prefix and the plain word of each objective.
_OBJECTIVE_COLUMNS = {"energy": "energy_j", "co2e": "co2e_kg", "cost": "cost"}
_OBJECTIVE_WORDS = {"energy": "energy", "co2e": "CO2e", "cost": "cost"}


def evaluate(cands: pd.DataFrame, energy_j: np.ndarray, time_s: np.ndarray, deadline_s: float | None = None,
             p: float = 0.9, energy_budget_j: float | None = None, prob: float = DEFAULT_PROB,
             rank_by: str = "median", co2e_kg: np.ndarray | None = None, cost: np.ndarray | None = None,
             objective: str = "energy", co2_budget_kg: float | None = None, cost_budget: float | None = None,
             currency: str = "", sites: Sequence[str] = ()) -> Plan:
    """Summarise joint draws of energy and time into a :class:`Plan`.

    Parameters
    ----------
    cands : pandas.DataFrame
        Candidates (``hardware``, ``strategy``, ``n_gpus`` at least).
    energy_j, time_s : numpy.ndarray
        Joint draws, shape (sample, candidate), in joules and seconds.
    deadline_s : float, optional
    p : float, default 0.9
        Probability with which the deadline must be met.
    energy_budget_j : float, optional
    prob : float
        Central interval probability.
    rank_by : {"median", "mean"}
        Statistic of the draws that the recommendation minimises and the
        Pareto front compares. The median is the default: under Student-t
        residuals on the log scale the predictive mean does not exist and
        its Monte Carlo estimate rests on a few tail draws.
    co2e_kg, cost : numpy.ndarray, optional
        Draws of kg CO2e and cost joint with ``energy_j`` (same shape), e.g.
        from :func:`bayes_energy.carbon.cross_sites`.
    objective : {"energy", "co2e", "cost"}, default "energy"
        What the recommendation minimises (its ``rank_by`` statistic) and the
        Pareto front weighs against time.
    co2_budget_kg, cost_budget : float, optional
        Reported as ``p_co2_budget`` and ``p_cost_budget`` (like the energy
        budget, they do not exclude candidates; a note says when the
        recommended one is at risk).
    currency : str
        Label of ``cost``.
    sites : sequence of str
        Descriptions of the sites, for the text.

    Returns
    -------
    Plan
        Its table holds the candidates plus ``energy_j_*``, ``energy_kwh_*``,
        ``time_s_*`` (``mean``, ``median``, ``lo``, ``hi``), ``power_w_median``,
        ``p_deadline`` and ``meets_deadline`` (with a deadline), ``p_budget``
        (with a budget), ``p_energy_below_single``, ``pareto``, ``p_pareto``
        and ``recommended``; with ``co2e_kg`` / ``cost`` also ``co2e_kg_*`` /
        ``cost_*`` and ``p_co2_budget`` / ``p_cost_budget`` (with budgets).
    """
    from .predict import summarize_draws

    if not 0 < p < 1:
        raise ValueError(f"p must lie in (0, 1), got {p}")
    if rank_by not in ("mean", "median"):
        raise ValueError(f"rank_by must be 'mean' or 'median', got {rank_by!r}")
    energy_j = np.asarray(energy_j, float)
    time_s = np.asarray(time_s, float)
    if energy_j.shape != time_s.shape or energy_j.shape[1] != len(cands):
        raise ValueError(f"draws must be (sample, {len(cands)}); got {energy_j.shape} and {time_s.shape}")
    extra = {k: np.asarray(v, float) for k, v in (("co2e_kg", co2e_kg), ("cost", cost)) if v is not None}
    for k, v in extra.items():
        if v.shape != energy_j.shape:
            raise ValueError(f"{k} draws must have the shape of the energy draws {energy_j.shape}, got {v.shape}")
    if objective not in _OBJECTIVE_COLUMNS:
        raise ValueError(f"objective must be one of {', '.join(_OBJECTIVE_COLUMNS)}, got {objective!r}")
    needs = {"co2e_kg": "a grid intensity (--region or --grid-gco2-per-kwh)", "cost": "a price (--price-per-kwh)"}
    for name, wanted, k in (("objective 'co2e'", objective == "co2e", "co2e_kg"),
                            ("objective 'cost'", objective == "cost", "cost"),
                            ("a CO2e budget", co2_budget_kg is not None, "co2e_kg"),
                            ("a cost budget", cost_budget is not None, "cost")):
        if wanted and k not in extra:
            raise ValueError(f"{name} needs {needs[k]}")
    for name, v in (("co2_budget_kg", co2_budget_kg), ("cost_budget", cost_budget)):
        if v is not None and not (np.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a positive number, got {v}")
    table = pd.concat([
        cands.reset_index(drop=True),
        summarize_draws(energy_j, prob, "energy_j"),
        summarize_draws(energy_j / KWH_TO_J, prob, "energy_kwh"),
        summarize_draws(time_s, prob, "time_s"),
        *[summarize_draws(v, prob, k) for k, v in extra.items()],
    ], axis=1)
    table["power_w_median"] = np.median(energy_j / time_s, axis=0)
    notes = []
    if deadline_s is not None:
        table["p_deadline"] = (time_s <= deadline_s).mean(axis=0)
        table["meets_deadline"] = table["p_deadline"] >= p
    if energy_budget_j is not None:
        table["p_budget"] = (energy_j <= energy_budget_j).mean(axis=0)
    if co2_budget_kg is not None:
        table["p_co2_budget"] = (extra["co2e_kg"] <= co2_budget_kg).mean(axis=0)
    if cost_budget is not None:
        table["p_cost_budget"] = (extra["cost"] <= cost_budget).mean(axis=0)
    # P(E < E of the single-device run on the same hardware (and site)), from the same joint draws
    below = np.full(len(table), np.nan)
    same = ["hardware", "region"] if "region" in table.columns else "hardware"
    for hw, idx in table.groupby(same).groups.items():
        single = [i for i in idx if table.at[i, "strategy"] == "single" and table.at[i, "n_gpus"] == 1]
        if single:
            ref = energy_j[:, single[0]]
            for i in idx:
                below[i] = np.nan if i == single[0] else float(np.mean(energy_j[:, i] < ref))
    table["p_energy_below_single"] = below
    col = _OBJECTIVE_COLUMNS[objective]
    obj_draws = energy_j if objective == "energy" else extra[col]
    table["pareto"] = pareto_front(table[f"time_s_{rank_by}"].to_numpy(), table[f"{col}_{rank_by}"].to_numpy())
    table["p_pareto"] = pareto_front(time_s, obj_draws).mean(axis=0)

    feasible = table["meets_deadline"] if deadline_s is not None else pd.Series(True, index=table.index)
    key = f"{col}_{rank_by}"
    recommended = None
    if feasible.any():
        recommended = int(table.loc[feasible, key].idxmin())
    else:
        best = table["p_deadline"].idxmax()
        notes.append(
            f"no candidate meets the deadline of {deadline_s:.6g} s with probability >= {p:g}; the likeliest is "
            f"{_describe(table.loc[best])} with P(T <= deadline) = {table.at[best, 'p_deadline']:.2f}"
        )
    table["recommended"] = False
    if recommended is not None:
        table.loc[recommended, "recommended"] = True
        rec = table.loc[recommended]
        if energy_budget_j is not None and rec["p_budget"] < p:
            notes.append(f"the recommended candidate stays within the energy budget with probability "
                         f"{rec['p_budget']:.2f} only (< {p:g})")
        for what, pcol in (("CO2e", "p_co2_budget"), ("cost", "p_cost_budget")):
            if pcol in table.columns and rec[pcol] < p:
                notes.append(f"the recommended candidate stays within the {what} budget with probability "
                             f"{rec[pcol]:.2f} only (< {p:g})")
        fastest = table[f"time_s_{rank_by}"].idxmin()
        # (at several sites the same configuration ties for fastest: no note when the recommended one is it)
        if fastest != recommended and table.at[fastest, f"time_s_{rank_by}"] < rec[f"time_s_{rank_by}"]:
            f = table.loc[fastest]
            word = _OBJECTIVE_WORDS[objective]
            notes.append(
                f"the fastest candidate, {_describe(f)}, would take {f[f'time_s_{rank_by}'] / rec[f'time_s_{rank_by}']:.2g}x "
                f"the time and {f[key] / rec[key]:.2g}x the {word} of the recommended one"
            )
    costlier = table[(table["n_gpus"] > 1) & (table["p_energy_below_single"] < 0.5)]
    if len(costlier):
        notes.append(f"{len(costlier)} of {int((table['n_gpus'] > 1).sum())} multi-device candidates more likely than "
                     "not use more energy than one device of the same hardware")
    return Plan(table=table, recommended=recommended, draws={"energy_j": energy_j, "time_s": time_s, **extra},
                deadline_s=deadline_s, p=p, energy_budget_j=energy_budget_j, prob=prob, rank_by=rank_by, notes=notes,
                objective=objective, co2_budget_kg=co2_budget_kg, cost_budget=cost_budget, currency=currency,
                sites=list(sites))


def plan(idata, workload: Workload | Mapping, strategies: Sequence[str] | None = None,
         n_gpus: Sequence[int] = (1, 2, 4, 8), hardware: Sequence[str] | None = None,
         deadline_s: float | None = None, p: float = 0.9, energy_budget_j: float | None = None,
         prob: float = DEFAULT_PROB, rank_by: str = "median", parallel_on_one: bool = False,
         n_draws: int | None = None, seed: int | None = None, allow_unknown_hardware: bool = False,
         sites=None, objective: str = "energy", co2_budget_kg: float | None = None,
         cost_budget: float | None = None) -> Plan:
    """Energy and time of every candidate configuration of a workload, and a choice.

    Parameters
    ----------
    idata : arviz.InferenceData or bayes_energy.models.io.Posterior
        A fitted posterior (``posterior.nc`` of ``python -m bayes_energy.fit``).
    workload : Workload or mapping
        Architecture and size: ``family``, ``num_layers``, ``hidden_size``,
        ``ff``, ``seq_len``, ``batch_size``, ``tokens`` (``grad_accum``
        optional).
    strategies : sequence of str, optional
        Candidate strategies; default every strategy the model was fitted on.
    n_gpus : sequence of int, default (1, 2, 4, 8)
        Device counts. ``single`` takes 1, the others the counts above 1.
        Counts never measured are allowed: they carry the speedup curves'
        extrapolation uncertainty.
    hardware : sequence of str, optional
        Hardware names or unique substrings of the model's hardware levels
        (e.g. ``"A100"``); default every hardware the model knows.
    deadline_s : float, optional
        Wall-time limit of the run in seconds.
    p : float, default 0.9
        Required probability of meeting the deadline.
    energy_budget_j : float, optional
        Energy budget in joules (reported as ``p_budget``).
    prob : float, default :data:`bayes_energy.DEFAULT_PROB`
        Central interval probability of the reported intervals.
    rank_by : {"median", "mean"}
        See :func:`evaluate`.
    parallel_on_one : bool, default False
        Also consider the parallel strategies on one device.
    n_draws, seed
        Thin the posterior; seed the predictive noise.
    allow_unknown_hardware : bool, default False
        Predict hardware the model never saw from its population of
        hardware instead of refusing it (see :func:`resolve_hardware`).
    sites : bayes_energy.carbon.Site or sequence of Site, optional
        Where the job could run (grid intensity, PUE, price). Every
        candidate is crossed with every site (a ``region`` column), with
        the same joint energy and time draws, and gets CO2e and/or cost
        draws (:func:`bayes_energy.carbon.cross_sites`, seeded by ``seed``).
    objective : {"energy", "co2e", "cost"}, default "energy"
        What the recommendation minimises (see :func:`evaluate`).
    co2_budget_kg, cost_budget : float, optional
        Budgets reported as ``p_co2_budget`` and ``p_cost_budget``.

    Returns
    -------
    Plan

    See Also
    --------
    bayes_energy.predict.predict_draws : the joint draws used here.

    Examples
    --------
    >>> w = Workload.from_architecture("bert-large", seq_len=128, batch_size=8, tokens=8e6)
    >>> p = plan(idata, w, n_gpus=range(1, 9), deadline_s=600)  # doctest: +SKIP
    >>> print(p)  # doctest: +SKIP
    >>> from bayes_energy.carbon import Site
    >>> green = plan(idata, w, deadline_s=600, sites=[Site.from_region("FR", pue="1.3+-0.1"),
    ...              Site.from_region("PL", pue=1.1)], objective="co2e")  # doctest: +SKIP
    """
    from .models.io import posterior_of
    from .predict import predict_draws

    if strategies is None:
        strategies = _known_levels(idata, "strategy")
    known_hw = _known_levels(idata, "hardware")
    hardware = resolve_hardware(list(hardware) if hardware is not None else known_hw, known_hw,
                                allow_unknown=allow_unknown_hardware,
                                by_specs=bool(posterior_of(idata).spec.config.get("spec_placement")))
    if deadline_s is not None and not (np.isfinite(deadline_s) and deadline_s > 0):
        raise ValueError(f"deadline_s must be a positive number of seconds, got {deadline_s}")
    if energy_budget_j is not None and not (np.isfinite(energy_budget_j) and energy_budget_j > 0):
        raise ValueError(f"energy_budget_j must be a positive number of joules, got {energy_budget_j}")
    if not 0 < prob < 1:
        raise ValueError(f"prob must lie in (0, 1), got {prob}")
    cands = candidates(workload, list(strategies), list(n_gpus), hardware, parallel_on_one=parallel_on_one)
    cands["evidence"] = evidence(idata, cands)
    if sites is not None:
        from .carbon import Site

        sites = [sites] if isinstance(sites, Site) else list(sites)
    draws = predict_draws(idata, cands, mode="pre", n_draws=n_draws, seed=seed)
    with np.errstate(over="ignore"):  # a far Student-t tail draw may exceed float range: it stays inf, and counts
        energy_j, time_s = np.exp(draws["log_energy_j"]), np.exp(draws["log_time_s"])
    conv = {}
    if sites:
        from .carbon import cross_sites, factor_rng

        cands, energy_j, time_s, conv = cross_sites(cands, energy_j, time_s, sites, factor_rng(seed))
    return evaluate(cands, energy_j, time_s, deadline_s=deadline_s, p=p, energy_budget_j=energy_budget_j, prob=prob,
                    rank_by=rank_by, co2e_kg=conv.get("co2e_kg"), cost=conv.get("cost"), objective=objective,
                    co2_budget_kg=co2_budget_kg, cost_budget=cost_budget,
                    currency=sites[0].currency if sites else "", sites=[s.describe(prob) for s in sites or ()])


def _parser():
    from .cli import Parser, positive_float, positive_int, probability

    ap = Parser(prog="python -m bayes_energy.plan",
                description="Energy and time of candidate configurations of a workload, and a recommendation.")
    ap.add_argument("--posterior", required=True, help="posterior.nc written by bayes_energy.fit")
    ap.add_argument("--arch", choices=sorted(ARCHITECTURES), help="a named architecture (sets family and sizes)")
    ap.add_argument("--family", help="model family, e.g. bert or gpt")
    ap.add_argument("--num-layers", type=positive_int)
    ap.add_argument("--hidden-size", type=positive_int)
    ap.add_argument("--ff", type=positive_int, help="feed-forward width")
    ap.add_argument("--heads", type=positive_int)
    ap.add_argument("--seq-len", type=positive_int, required=True)
    ap.add_argument("--batch-size", type=positive_int, required=True)
    ap.add_argument("--grad-accum", type=positive_int, default=1)
    ap.add_argument("--tokens", type=positive_float, required=True, help="tokens the run processes")
    ap.add_argument("--strategies", nargs="+", choices=STRATEGIES, help="default: those the model was fitted on")
    ap.add_argument("--n-gpus", nargs="+", type=positive_int, default=[1, 2, 4, 8])
    ap.add_argument("--hardware", nargs="+", help="hardware names or unique parts of them (default: all the model knows)")
    ap.add_argument("--allow-unknown-hardware", action="store_true",
                    help="predict --hardware the fit never saw from the population of hardware (wide intervals)")
    ap.add_argument("--deadline-s", type=positive_float)
    ap.add_argument("--p", type=probability, default=0.9, help="probability of meeting the deadline (default %(default)s)")
    budget = ap.add_mutually_exclusive_group()
    budget.add_argument("--energy-budget-j", type=positive_float)
    budget.add_argument("--energy-budget-kwh", type=positive_float)
    ap.add_argument("--prob", type=probability, default=DEFAULT_PROB, help="central interval probability (default %(default)s)")
    ap.add_argument("--rank-by", choices=("median", "mean"), default="median",
                    help="statistic of the predictive draws to minimise (default %(default)s; see the module docs)")
    ap.add_argument("--objective", choices=("energy", "co2e", "cost"), default="energy",
                    help="what the recommendation minimises (co2e needs --region or --grid-gco2-per-kwh, cost "
                         "--price-per-kwh; default %(default)s)")
    ap.add_argument("--co2-budget-kg", type=positive_float, help="CO2e budget in kg (reported as p_co2_budget)")
    ap.add_argument("--cost-budget", type=positive_float, help="cost budget in the price's currency (p_cost_budget)")
    from .carbon import add_site_arguments

    add_site_arguments(ap, multiple=True)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--probe", metavar="PROBE.csv",
                    help="measured windows of this job (sweep-table rows): show each candidate's energy before and "
                         "after the probe, and how much of the remaining width is run-to-run noise")
    ap.add_argument("--out", help="also write the full candidate table as CSV (an existing file only with --overwrite)")
    ap.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    return ap


def main(argv: list[str] | None = None) -> int:
    """``python -m bayes_energy.plan``; returns the exit status (2 on bad input)."""
    from .cli import OutputError, check_output_file, fail, plain_warnings, write_file

    args = _parser().parse_args(argv)
    plain_warnings()
    from .models.io import PosteriorFileError, load
    from .predict import NewLevelWarning

    try:
        out = check_output_file(args.out, overwrite=args.overwrite) if args.out else None
        arch = dict(ARCHITECTURES[args.arch]) if args.arch else {}
        for key in ("family", "num_layers", "hidden_size", "ff", "heads"):
            value = getattr(args, key)
            if value is not None:
                arch[key] = value
        missing = [k for k in ("family", "num_layers", "hidden_size", "ff") if k not in arch]
        if missing:
            raise ValueError(f"the workload needs --arch or --{' --'.join(m.replace('_', '-') for m in missing)}")
        workload = Workload(**arch, seq_len=args.seq_len, batch_size=args.batch_size, tokens=args.tokens,
                            grad_accum=args.grad_accum)
        budget = args.energy_budget_j if args.energy_budget_j is not None else (
            args.energy_budget_kwh * KWH_TO_J if args.energy_budget_kwh is not None else None)
        from .carbon import sites_from_args

        sites = sites_from_args(args)
        for opt, wanted, given, how in (
                ("--objective co2e", args.objective == "co2e", "intensity", "--region or --grid-gco2-per-kwh"),
                ("--co2-budget-kg", args.co2_budget_kg is not None, "intensity", "--region or --grid-gco2-per-kwh"),
                ("--objective cost", args.objective == "cost", "price", "--price-per-kwh"),
                ("--cost-budget", args.cost_budget is not None, "price", "--price-per-kwh")):
            if wanted and not any(getattr(s, given) is not None for s in sites):
                raise ValueError(f"{opt} needs {how}")
        idata = load(args.posterior)
        with warnings.catch_warnings():
            warnings.simplefilter("always", NewLevelWarning)
            result = plan(idata, workload, strategies=args.strategies, n_gpus=args.n_gpus, hardware=args.hardware,
                          deadline_s=args.deadline_s, p=args.p, energy_budget_j=budget, prob=args.prob,
                          rank_by=args.rank_by, seed=args.seed, allow_unknown_hardware=args.allow_unknown_hardware,
                          sites=sites or None, objective=args.objective, co2_budget_kg=args.co2_budget_kg,
                          cost_budget=args.cost_budget)
        if out is not None:
            write_file(out, lambda tmp: result.table.to_csv(tmp, index=False))
    except (SchemaError, PosteriorFileError, OutputError, ValueError, FileNotFoundError) as err:
        return fail(err)
    print(result.to_text())
    if args.probe:
        from .probe import probe_update, read_probe

        try:
            windows = read_probe(args.probe)
            hw = resolve_hardware(list(windows["hardware"].unique()), list(result.table["hardware"].unique()))
            job = result.table[result.table["hardware"].isin(hw)]
            if "region" in job.columns:  # the same job at every site: probe it once
                job = job[job["region"] == job["region"].iloc[0]] if len(job) else job
            if job.empty:
                raise ValueError(f"--probe {args.probe}: its hardware {', '.join(hw)} is not among the candidates")
            res = probe_update(idata, windows.assign(hardware=windows["hardware"].replace(dict(zip(
                windows["hardware"].unique(), hw)))), job.reset_index(drop=True), prob=args.prob, seed=args.seed,
                source=args.probe)
        except (SchemaError, ValueError, FileNotFoundError) as err:
            return fail(err)
        print("\n" + res.to_text())
    if out is not None:
        print(f"wrote {len(result.table)} candidates to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
