"""Model specification: from a sweep table to named, standardised arrays.

The spec stage needs no sampling (bambi's first stage). It fixes

* the coordinates (``cell`` = hardware x family, ``strategy``, ``group``, ``coef``),
* the centring constants of every log feature, taken from the training table
  and stored in the model config so that prediction reuses them,
* the design arrays that feed ``pm.Data`` in :mod:`bayes_energy.models.build`
  and the numpy mirror in :mod:`bayes_energy.models.law`.

Conventions: natural logs; energy in joules and time in seconds before
logging; ``run`` is the row dimension.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..proxies import add_proxies
from ..schema import STRATEGIES
from .curves import CURVE_OF, CURVE_PARAMS, CURVES

__all__ = ["ModelSpec", "by_coef", "LAW_FEATURES", "EXTRA_FEATURES", "SECOND_ORDER_FEATURES", "STRATEGY_SLOPE_FEATURES", "CURVE_FEATURES", "design_frame", "CURVE_OF", "cell_labels"]

#: Features of the paper's law, in order (the slopes are alpha_C, alpha_M, alpha_eta).
LAW_FEATURES = ("log_compute", "log_memory", "log_eta")
#: Extra features of the hierarchical model (corrections the law leaves out).
EXTRA_FEATURES = ("log_tokens", "log_seq_len", "log_batch", "log_n_gpus")
#: Second-order terms (``config["second_order"]``): ``log_params`` enters linearly and each of these
#: features also as ``sq_<feature>`` = z² - mean(z²), z its standardised value (so 0 on average over
#: the training table, and 0 everywhere there for a feature the table holds constant).
#: The device count is left out: its dependence is the speedup curves' (physics), and a square in
#: ln N would extrapolate to unmeasured device counts without any curve behind it.
SECOND_ORDER_FEATURES = ("log_compute", "log_memory", "log_params", "log_tokens", "log_seq_len", "log_batch")
#: Features that may take a slope per strategy (``config["strategy_slopes"]``, a subset): the linear ones.
STRATEGY_SLOPE_FEATURES = tuple(f for f in LAW_FEATURES if f != "log_eta") + EXTRA_FEATURES + ("log_params",)
#: Covariates of the speedup-curve parameters (bigger models parallelise differently).
CURVE_FEATURES = ("log_params", "log_tokens", "log_seq_len", "log_batch")
#: Curve parameters the covariates move by default (each curve's ``moved``, models.curves);
#: ``config["curve_covariates_on"]`` can name others.
DEFAULT_CURVE_MOVED = tuple(p for c in CURVES.values() for p in c.moved)


def by_coef(prior, coefs) -> np.ndarray:
    """A per-coefficient prior (a mapping keyed by coefficient name, or one number) as an array over ``coefs``."""
    if isinstance(prior, dict):
        missing = [c for c in coefs if c not in prior]
        if missing:
            raise ValueError(f"prior {prior} has no value for coefficient(s) {', '.join(missing)}")
        return np.asarray([float(prior[c]) for c in coefs])
    if isinstance(prior, (list, tuple)):
        raise ValueError(f"per-coefficient priors are keyed by name ({', '.join(coefs)}), not given by position: {prior}")
    return np.full(len(coefs), float(prior))


def cell_labels(df: pd.DataFrame) -> pd.Series:
    """Hardware x family cell labels, ``"<hardware>|<family>"``."""
    return df["hardware"].astype(str) + "|" + df["family"].astype(str)


#: Columns that define a configuration family (a workload on a device) when a table has no ``group``.
WORKLOAD_KEY = ("hardware", "family", "num_layers", "hidden_size", "ff", "seq_len", "batch_size", "grad_accum")


def group_keys(df: pd.DataFrame) -> pd.Series:
    """Configuration-family label of each row: ``group`` if given, else the workload key.

    Strategy and device count are not part of it, so all variants of one
    workload share a family (and its correlated residual).
    """
    if "group" in df.columns:
        return df["group"].astype(str)
    cols = list(WORKLOAD_KEY) + (["workload"] if "workload" in df.columns else [])
    return df[cols].astype(str).agg("|".join, axis=1)


def design_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Log features of a sweep (or candidate) table, uncentred.

    ``log_eta`` is the observed log efficiency (NaN where unknown, 0 for
    single-device runs).
    """
    p = add_proxies(df)
    out = pd.DataFrame(index=df.index)
    out["log_compute"] = np.log(p["compute"].to_numpy(float))
    out["log_memory"] = np.log(p["memory"].to_numpy(float))
    out["log_params"] = np.log(p["params"].to_numpy(float))
    out["log_tokens"] = np.log(df["tokens"].to_numpy(float))
    out["log_seq_len"] = np.log(df["seq_len"].to_numpy(float))
    out["log_batch"] = np.log((df["batch_size"] * df["grad_accum"]).to_numpy(float))
    out["log_n_gpus"] = np.log(df["n_gpus"].to_numpy(float))
    if "efficiency" in df.columns:
        eta = df["efficiency"].to_numpy(float)
    else:
        eta = np.full(len(df), np.nan)
    eta = np.where(df["strategy"].to_numpy() == "single", 1.0, eta)
    out["log_eta"] = np.log(eta)
    return out


@dataclass
class ModelSpec:
    """Coordinates, centring constants and design arrays of one model.

    Build it with :meth:`from_table`; :meth:`arrays` turns any table (training
    or candidates) into the arrays the model and the numpy law use.

    Attributes
    ----------
    name : str
        ``pooled`` or ``hierarchical``.
    config : dict
        JSON-serialisable model config (priors, switches, centring constants,
        levels). It is saved with the posterior.
    """

    name: str
    config: dict[str, Any]
    coords: dict[str, list] = field(default_factory=dict)

    @classmethod
    def from_table(cls, df: pd.DataFrame, name: str, config: dict[str, Any], levels: dict[str, list] | None = None) -> ModelSpec:
        """Make a spec from a training table.

        Parameters
        ----------
        df : pandas.DataFrame
            Validated sweep table with ``efficiency`` (see
            :func:`bayes_energy.schema.add_efficiency`).
        name : str
            Model name.
        config : dict
            Model config (see :mod:`bayes_energy.models.pooled` and
            :mod:`bayes_energy.models.hierarchical`).
        levels : dict, optional
            Fixed level lists for ``hardware``, ``family``, ``strategy`` and
            ``group``, e.g. those of a full table when refitting on folds
            of it with one compiled model.
        """
        levels = dict(levels or {})
        x = design_frame(df)
        have = [s for s in STRATEGIES if s in set(df["strategy"])]
        cfg = json.loads(json.dumps(config))
        cfg["levels"] = {
            "hardware": levels.get("hardware") or sorted(df["hardware"].unique().tolist()),
            "family": levels.get("family") or sorted(df["family"].unique().tolist()),
            "strategy": levels.get("strategy") or (["single"] + [s for s in have if s != "single"]),
            "cell": levels.get("cell") or sorted(cell_labels(df).unique().tolist()),
            "group": levels.get("group") or sorted(group_keys(df).unique().tolist()),
        }
        if "single" not in cfg["levels"]["strategy"]:
            cfg["levels"]["strategy"] = ["single"] + cfg["levels"]["strategy"]
        feats = set(LAW_FEATURES) | set(EXTRA_FEATURES) | set(CURVE_FEATURES) | set(SECOND_ORDER_FEATURES)
        cfg["centre"] = {f: float(np.nanmean(x[f])) for f in sorted(feats) if f != "log_eta"}
        cfg["centre"]["log_eta"] = 0.0
        # a constant feature has a std of rounding noise (~1e-16), not 0: dividing by it
        # turned 1-ulp differences from the centre into |Z| ~ 1e15 (inf efficiency pre-run)
        cfg["scale"] = {f: (sd if sd > 1e-8 else 1.0) for f in sorted(set(CURVE_FEATURES) | set(SECOND_ORDER_FEATURES))
                        for sd in [float(np.nanstd(x[f]))]}
        for f in SECOND_ORDER_FEATURES:  # centre of z²: 1, or 0 for a feature constant in the table
            cfg["centre"][f"sq_{f}"] = float(np.nanmean(((x[f] - cfg["centre"][f]) / cfg["scale"][f]) ** 2))
        y = np.log(df["energy_j"].to_numpy(float))
        t = np.log(df["time_s"].to_numpy(float))
        cfg["centre"]["log_energy"] = float(np.mean(y))
        cfg["centre"]["log_time"] = float(np.mean(t))
        spec = cls(name=name, config=cfg)
        spec.coords = spec._coords()
        return spec

    # ------------------------------------------------------------------ coords
    @property
    def curve_moved(self) -> list[str]:
        """The curve parameters that the covariates move (``config["curve_covariates_on"]``)."""
        return list(self.config.get("curve_covariates_on", DEFAULT_CURVE_MOVED))

    @property
    def curve_moved_index(self) -> list[int]:
        """Positions of :attr:`curve_moved` in ``curve_param``."""
        return [CURVE_PARAMS.index(p) for p in self.curve_moved]

    @property
    def energy_features(self) -> list[str]:
        """Features of the energy and time blocks (intercept first)."""
        extra = list(EXTRA_FEATURES) if self.config.get("extra_features", False) else []
        if self.config.get("second_order", False):
            extra += ["log_params"] + [f"sq_{f}" for f in SECOND_ORDER_FEATURES]
        return ["intercept", *LAW_FEATURES, *extra, *self.strategy_slope_coefs]

    @property
    def strategy_slope_coefs(self) -> list[str]:
        """Slopes per strategy (``config["strategy_slopes"]``): ``"<strategy>:<feature>"`` = 1[strategy] x centred feature."""
        return [f"{s}:{f}" for s in self.strategies if s != "single" for f in self.config.get("strategy_slopes", [])]

    @property
    def strategies(self) -> list[str]:
        return list(self.config["levels"]["strategy"])

    def _coords(self) -> dict[str, list]:
        lv = self.config["levels"]
        curve_strats = [s for s in self.strategies if s != "single"]
        coords = {
            "hardware": list(lv["hardware"]),
            "family": list(lv["family"]),
            "cell": list(lv["cell"]),
            "strategy": list(self.strategies),
            "strategy_multi": curve_strats,
            "coef": self.energy_features,
            "curve_coef": list(CURVE_FEATURES),
            "curve_param": list(CURVE_PARAMS),
            "curve_main": self.curve_moved,
        }
        if self.config.get("group_effects", False):
            coords["group"] = list(lv["group"])
        return coords

    def cell_parents(self) -> tuple[np.ndarray, np.ndarray]:
        """Hardware and family index of every cell level (for crossed pooling)."""
        lv = self.config["levels"]
        hw = {h: i for i, h in enumerate(lv["hardware"])}
        fam = {f: i for i, f in enumerate(lv["family"])}
        pairs = [c.rsplit("|", 1) for c in lv["cell"]]
        return (np.array([hw[h] for h, _ in pairs], dtype="int64"),
                np.array([fam[f] for _, f in pairs], dtype="int64"))

    # ------------------------------------------------------------------ arrays
    def index_of(self, dim: str, values: pd.Series, allow_new: bool = False) -> np.ndarray:
        """Integer codes of ``values`` in the level list of ``dim``.

        Unknown values get codes past the end (``len(levels) + k``) when
        ``allow_new`` is true, so that the caller can draw them from the
        population; otherwise a ValueError names them.
        """
        levels = list(self.config["levels"][dim])
        lookup = {v: i for i, v in enumerate(levels)}
        vals = values.astype(str).to_numpy()
        new = sorted({v for v in vals if v not in lookup})
        if new and not allow_new:
            raise ValueError(f"unknown {dim} level(s) {', '.join(new)}; the model knows {', '.join(levels)}")
        for k, v in enumerate(new):
            lookup[v] = len(levels) + k
        return np.array([lookup[v] for v in vals], dtype="int64")

    def arrays(self, df: pd.DataFrame, allow_new: bool = False) -> dict[str, np.ndarray]:
        """Design arrays for a table (training rows or candidates).

        Returns a dict with ``X`` (run, coef), ``Z`` (run, curve_coef), the
        integer indexes, the device count, the curve type, the observed log
        efficiency (NaN where unknown) and, where the table has outcomes,
        ``log_energy`` and ``log_time`` (centred).
        """
        x = design_frame(df)
        c = self.config["centre"]
        s = self.config["scale"]
        strat = df["strategy"].astype(str)
        def column(f):
            if f.startswith("sq_"):  # second-order term: z² centred, z standardised on the training table
                return ((x[f[3:]].to_numpy() - c[f[3:]]) / s[f[3:]]) ** 2 - c[f]
            if ":" in f:  # slope of one strategy: the centred feature on that strategy's rows, 0 elsewhere
                strategy, g = f.split(":", 1)
                return (strat.to_numpy() == strategy) * (x[g].to_numpy() - c[g])
            return x[f].to_numpy() - c[f]

        X = np.column_stack([np.ones(len(df))] + [column(f) for f in self.energy_features[1:]])
        X = np.nan_to_num(X, nan=0.0)  # unknown efficiency: the law takes it from the curves
        Z = np.column_stack([(x[f].to_numpy() - c[f]) / s[f] for f in CURVE_FEATURES])
        cell_idx = self.index_of("cell", cell_labels(df), allow_new)
        n_cells = len(self.config["levels"]["cell"])
        out: dict[str, np.ndarray] = {
            "X": X,
            "Z": Z,
            "cell_idx": cell_idx,
            "cell_onehot": np.eye(max(n_cells, int(cell_idx.max(initial=-1)) + 1))[cell_idx],
            "strategy_idx": self.index_of("strategy", strat),
            "n_gpus": df["n_gpus"].to_numpy(float),
            "curve": strat.map(CURVE_OF).to_numpy("int64"),
            "log_eta_obs": x["log_eta"].to_numpy(),
            # ln of the training FLOP count 6 N D (uncentred): the work a spec-placed GPU does at its roofline
            "log_train_flop": np.log(6.0) + x["log_params"].to_numpy() + x["log_tokens"].to_numpy(),
        }
        if self.config.get("group_effects", False):
            out["group_idx"] = self.index_of("group", group_keys(df), allow_new=True)
        if "energy_j" in df.columns and "time_s" in df.columns:
            out["log_energy"] = np.log(df["energy_j"].to_numpy(float)) - c["log_energy"]
            out["log_time"] = np.log(df["time_s"].to_numpy(float)) - c["log_time"]
        return out
