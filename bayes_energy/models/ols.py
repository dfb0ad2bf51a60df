r"""``ols``: the paper's law by least squares, for side-by-side comparison.

.. math::

    \ln E = \beta_0 + \alpha_C \ln C + \alpha_M \ln M + \alpha_\eta \ln\eta_h
            + \Psi_{strategy} + \gamma_{family} + \varepsilon

with the log features centred on the training means, ``single`` and the
first family as reference levels. It has no posterior: a point fit, the
coefficients' standard errors (cluster-robust by configuration family when
the table has ``group``), adjusted R² and the residual scale.

The *pre-run* variant predicts :math:`\ln\eta_h` before the run with a
nested regression on configuration information only (log device count,
log parameters, log tokens, log sequence length, log batch, strategy and
family), fitted on the training rows that have more than one device.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .spec import design_frame

__all__ = ["OLSFit", "fit_ols"]

ETA_FEATURES = ("log_n_gpus", "log_params", "log_tokens", "log_seq_len", "log_batch")


def _dummies(values: pd.Series, levels: list[str], prefix: str) -> pd.DataFrame:
    return pd.DataFrame({f"{prefix}[{lv}]": (values.astype(str) == lv).astype(float).to_numpy()
                         for lv in levels[1:]}, index=values.index)


@dataclass
class OLSFit:
    """A fitted OLS law; see :func:`fit_ols`."""

    coef: pd.Series
    se: pd.Series
    sigma: float
    r2: float
    adj_r2: float
    n: int
    centre: dict
    strategies: list
    families: list
    eta_coef: pd.Series | None = None
    extras: dict = field(default_factory=dict)

    def _design(self, df: pd.DataFrame, log_eta: np.ndarray) -> pd.DataFrame:
        x = design_frame(df)
        X = pd.DataFrame({"intercept": 1.0}, index=df.index)
        X["log_compute"] = x["log_compute"] - self.centre["log_compute"]
        X["log_memory"] = x["log_memory"] - self.centre["log_memory"]
        X["log_eta"] = log_eta - self.centre["log_eta"]
        X = X.join(_dummies(df["strategy"], self.strategies, "strategy"))
        if len(self.families) > 1:
            X = X.join(_dummies(df["family"], self.families, "family"))
        return X[self.coef.index]

    def log_eta_pre(self, df: pd.DataFrame) -> np.ndarray:
        """Pre-run log efficiency from the nested regression (0 for single)."""
        Xe = _eta_design(df, self.strategies, self.families, self.centre)
        pred = Xe[self.eta_coef.index].to_numpy() @ self.eta_coef.to_numpy()
        return np.where(df["n_gpus"].to_numpy() > 1, pred, 0.0)

    def predict(self, df: pd.DataFrame, post_run: bool = True) -> np.ndarray:
        """Point predictions of ln energy (ln J) for a table.

        ``post_run`` uses the table's measured ``efficiency``; otherwise the
        nested regression predicts it.
        """
        log_eta = design_frame(df)["log_eta"].to_numpy() if post_run else self.log_eta_pre(df)
        if post_run and np.isnan(log_eta).any():
            raise ValueError("post-run prediction needs a measured 'efficiency' on every row")
        return self._design(df, log_eta).to_numpy() @ self.coef.to_numpy()


def _eta_design(df, strategies, families, centre):
    x = design_frame(df)
    X = pd.DataFrame({"intercept": 1.0}, index=df.index)
    for f in ETA_FEATURES:
        X[f] = x[f] - centre[f]
    X = X.join(_dummies(df["strategy"], strategies, "strategy"))
    if len(families) > 1:
        X = X.join(_dummies(df["family"], families, "family"))
    return X


def _lstsq(X: np.ndarray, y: np.ndarray, groups: np.ndarray | None):
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    resid = y - X @ beta
    n, k = X.shape
    bread = np.linalg.pinv(X.T @ X)
    if groups is not None:
        meat = np.zeros((k, k))
        for g in np.unique(groups):
            s = X[groups == g].T @ resid[groups == g]
            meat += np.outer(s, s)
        G = len(np.unique(groups))
        cov = bread @ meat @ bread * (G / max(G - 1, 1)) * ((n - 1) / max(n - k, 1))
    else:
        cov = bread * (resid @ resid) / max(n - k, 1)
    return beta, resid, np.sqrt(np.diag(cov))


def fit_ols(df: pd.DataFrame, family: bool = True) -> OLSFit:
    """Fit the paper's law by least squares.

    Parameters
    ----------
    df : pandas.DataFrame
        A sweep table with ``efficiency`` on every row.
    family : bool, default True
        Add family intercepts when there is more than one family.

    Returns
    -------
    OLSFit
    """
    x = design_frame(df)
    if x["log_eta"].isna().any():
        raise ValueError("the OLS law needs a measured efficiency on every row; rows without a single-device partner have none")
    centre = {c: float(x[c].mean()) for c in ("log_compute", "log_memory", "log_eta", *ETA_FEATURES)}
    strategies = ["single"] + sorted(set(df["strategy"]) - {"single"})
    families = sorted(set(df["family"])) if family else []
    stub = OLSFit(coef=pd.Series(dtype=float), se=pd.Series(dtype=float), sigma=0, r2=0, adj_r2=0, n=0,
                  centre=centre, strategies=strategies, families=families)
    cols = ["intercept", "log_compute", "log_memory", "log_eta"]
    cols += [f"strategy[{s}]" for s in strategies[1:]]
    cols += [f"family[{f}]" for f in families[1:]] if len(families) > 1 else []
    stub.coef = pd.Series(0.0, index=cols)
    X = stub._design(df, x["log_eta"].to_numpy())
    y = np.log(df["energy_j"].to_numpy(float))
    groups = df["group"].astype(str).to_numpy() if "group" in df.columns else None
    beta, resid, se = _lstsq(X.to_numpy(), y, groups)
    n, k = X.shape
    r2 = 1 - resid @ resid / np.sum((y - y.mean()) ** 2)
    multi = df["n_gpus"].to_numpy() > 1
    Xe = _eta_design(df, strategies, families, centre)
    eta_beta = np.linalg.lstsq(Xe.to_numpy()[multi], x["log_eta"].to_numpy()[multi], rcond=None)[0] if multi.any() else np.zeros(Xe.shape[1])
    return OLSFit(
        coef=pd.Series(beta, index=cols), se=pd.Series(se, index=cols),
        sigma=float(np.sqrt(resid @ resid / max(n - k, 1))), r2=float(r2),
        adj_r2=float(1 - (1 - r2) * (n - 1) / max(n - k, 1)), n=int(n), centre=centre,
        strategies=strategies, families=families, eta_coef=pd.Series(eta_beta, index=Xe.columns),
    )
