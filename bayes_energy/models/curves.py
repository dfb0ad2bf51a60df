r"""Speedup curves: small registered components (pure functions + default priors).

Each curve maps the device count :math:`N` and the row's curve parameters to
the log hardware efficiency :math:`\ln\eta_h(N) = \ln S(N) - \ln N`. The
functions work on numpy arrays and on PyTensor tensors alike (the caller
passes the math module), so the sampled model and the numpy predictions
share one definition. A curve is declared once, in :data:`CURVES`: its
function, parameter names, default prior means, the parameters the
configuration covariates move, and the strategies that use it. The model's
``curve_param`` dimension, the strategies' curve codes and the predictions
all read from it.

* ``usl`` (FSDP, DDP): the universal-scalability family with a one-off
  distribution overhead (a generalised Amdahl law),

  .. math::

      S(N) = \frac{N}{1 + \omega + \sigma(N-1)}, \qquad N > 1,

  and :math:`S(1) = 1`. :math:`\omega` is the cost of running distributed at
  all (sharding, collectives and their synchronisation that appear as soon as
  there are two devices), :math:`\sigma` the contention that grows with
  :math:`N`; Amdahl at :math:`\omega = 0`. The onset :math:`\omega` is what
  the measurements need: on the authors' table FSDP on two devices already
  runs at :math:`\eta \approx 0.2`-:math:`0.6`, while from 2 to 4 or 6
  devices the efficiency falls only by :math:`N^{-0.2}`-:math:`N^{-0.4}` at
  fixed configuration. Gunther's form without :math:`\omega` cannot have
  both (held-out ln efficiency RMSE 0.21 against 0.09 with it, per-cell least
  squares on 8 grouped splits; ``benchmarks/validate_mayaki2026.py`` reports
  the Bayesian fit's ``eta_rmse``). Gunther's coherency term
  :math:`\kappa N(N-1)` is left out: with the onset in, device counts of 2
  and 4 (the 2080 Ti cells) cannot separate it from :math:`\sigma` and
  :math:`\omega`, and the full reference fit did not converge with it
  (4 chains: max R-hat 1.62, ESS 7 along the :math:`\sigma`-:math:`\kappa`
  ridge; without it 1.01 and ESS 515). The covariates move :math:`\omega`
  only: moving :math:`\sigma` too made the 2080 Ti x BERT cell, whose
  efficiency barely falls with :math:`N`, a funnel (R-hat 1.74).
  :math:`S(N) \le N` always.
* ``saturating`` (TP): :math:`S(N) = 1 + (S_\infty - 1)(1 - e^{-k(N-1)})`,
  capped at :math:`S(N) \le N`. :math:`S_\infty < 1` is allowed:
  tensor parallelism over a slow link can make a run slower than one device
  (the 2080 Ti data show it).

Parameters enter on the log scale: ``usl_sigma`` = :math:`\ln\sigma`,
``usl_omega`` = :math:`\ln\omega`,
``tp_gain`` = :math:`\ln S_\infty`, ``tp_rate`` = :math:`\ln k`.

Adding a curve: write its function and add a :class:`Curve` to :data:`CURVES`
(its strategies, parameter names, prior means, which parameters the
covariates move, report labels); the spec, the model, the law, predict,
simulate and the report read everything from here. That is one file, plus
its tests, and a refit (saved posteriors name their curve parameters).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["Curve", "usl_log_eta", "saturating_log_eta", "CURVES", "CURVE_PARAMS", "CURVE_OF", "log_eta",
           "param_slices"]


def usl_log_eta(n, log_sigma, log_omega, m):
    """Log efficiency under the generalised Amdahl law with a distribution overhead.

    The overhead applies from two devices on (``min(n - 1, 1)`` is 0 at one
    device, 1 from two), so that :math:`S(1) = 1`.
    """
    onset = m.minimum(n - 1.0, 1.0)
    return -m.log1p(m.exp(log_omega) * onset + m.exp(log_sigma) * (n - 1.0))


def saturating_log_eta(n, log_gain, log_rate, m):
    r"""Log efficiency under the saturating exponential (``log_gain`` = ln S_inf), capped at ln eta <= 0.

    With a ceiling :math:`S_\infty > 1` and a fast rate the exponential
    alone would give :math:`S(2) > 2`, a super-linear speedup no tensor
    split produces; ``min(ln eta, 0)`` keeps :math:`S(N) \le N` and leaves
    the curve (and its gradient) unchanged wherever :math:`\eta < 1`, where
    the measurements are. (A smooth minimum, ``-softplus(-20 x) / 20``, was
    tried first: it cut the default CPU fit's tail ESS of the TP rate from 774
    to 67, so it went.)
    """
    speedup = 1.0 + (m.exp(log_gain) - 1.0) * (1.0 - m.exp(-m.exp(log_rate) * (n - 1.0)))
    return m.minimum(m.log(speedup) - m.log(n), 0.0)


@dataclass(frozen=True)
class Curve:
    """One speedup curve.

    Attributes
    ----------
    fn : callable
        ``fn(n, *params, m) -> ln eta`` for ``n > 1`` (``m`` is ``numpy`` or
        ``pytensor.tensor``).
    params : tuple of str
        Parameter names (log scale), in ``fn``'s order.
    prior_mu : tuple of float
        Default prior means of the population parameters.
    moved : tuple of str
        Parameters the configuration covariates move by default.
    strategies : tuple of str
        Strategies that use the curve.
    labels : tuple of str
        How the report names each parameter (default: its name).
    """

    fn: Callable
    params: tuple[str, ...]
    prior_mu: tuple[float, ...]
    moved: tuple[str, ...]
    strategies: tuple[str, ...]
    labels: tuple[str, ...] = ()

    def label(self, param: str) -> str:
        """The report's name of ``param``."""
        return self.labels[self.params.index(param)] if self.labels else param


#: Registered curves, in the order of their codes (1, 2, ...; 0 means no curve, single device).
CURVES = {
    "usl": Curve(usl_log_eta, ("usl_sigma", "usl_omega"), (-2.0, -1.0), ("usl_omega",), ("ddp", "fsdp"),
                 ("USL ln σ (contention)", "USL ln ω (distribution overhead)")),
    "saturating": Curve(saturating_log_eta, ("tp_gain", "tp_rate"), (0.0, 0.0), ("tp_gain",), ("tp",),
                        ("TP ln S∞ (ceiling)", "TP ln k (rate)")),
}
#: All curve parameters, in the order of the model's ``curve_param`` dimension.
CURVE_PARAMS = tuple(p for c in CURVES.values() for p in c.params)
#: Curve code of each strategy: 0 none (single device), else 1 + the curve's position in CURVES.
CURVE_OF = {"single": 0} | {s: i + 1 for i, c in enumerate(CURVES.values()) for s in c.strategies}


def param_slices() -> list[tuple[int, Curve, slice]]:
    """``(code, curve, slice of curve_param)`` for every registered curve."""
    out, start = [], 0
    for i, c in enumerate(CURVES.values()):
        out.append((i + 1, c, slice(start, start + len(c.params))))
        start += len(c.params)
    return out


def log_eta(n, curve, theta, m):
    """Log efficiency of each row under its strategy's curve.

    Parameters
    ----------
    n : array
        Device counts.
    curve : int array
        Curve codes (:data:`CURVE_OF`): 0 for single-device strategies (log
        efficiency 0).
    theta : array (..., run, curve_param)
        Row-wise curve parameters in the order of :data:`CURVE_PARAMS`.
    m : module
        ``numpy`` or ``pytensor.tensor``.
    """
    if m.__name__ == "numpy":
        # evaluate each curve only on its own rows (posterior draws x candidates is large)
        out = np.zeros(np.broadcast_shapes(theta.shape[:-1], np.shape(n)))
        for code, c, sl in param_slices():
            rows = np.flatnonzero(curve == code)
            if len(rows):
                args = [theta[..., rows, j] for j in range(sl.start, sl.stop)]
                out[..., rows] = c.fn(n[rows], *args, np)
        return out
    # in the graph theta is (run, curve_param). Each curve on its own rows only: every curve on every row, then
    # picking with where, made the curves part's gradient 92 us against 64-70 on the reference table (docs/speed.md
    # section 21)
    out = m.zeros_like(n, dtype=theta.dtype)
    for code, c, sl in param_slices():
        rows = m.flatnonzero(m.eq(curve, code))
        out = m.set_subtensor(out[rows], c.fn(n[rows], *[theta[rows, j] for j in range(sl.start, sl.stop)], m))
    return out
