r"""Speedup curves: small registered components (pure functions + default priors).

Each curve maps the device count :math:`N` and the row's curve parameters to
the log hardware efficiency :math:`\ln\eta_h(N) = \ln S(N) - \ln N`. The
functions work on numpy arrays and on PyTensor tensors alike (the caller
passes the math module), so the sampled model and the numpy predictions
share one definition.

* ``usl`` (FSDP, DDP): Gunther's universal scalability law,
  :math:`S(N) = N / (1 + \sigma(N-1) + \kappa N(N-1))`; Amdahl at
  :math:`\kappa = 0`.
* ``saturating`` (TP): :math:`S(N) = 1 + (S_\infty - 1)(1 - e^{-k(N-1)})`.
  :math:`S_\infty < 1` is allowed: tensor parallelism over a slow link can
  make a run slower than one device (the 2080 Ti data show it).

Parameters enter on the log scale: ``usl_sigma`` = :math:`\ln\sigma`,
``usl_kappa`` = :math:`\ln\kappa`, ``tp_gain`` = :math:`\ln S_\infty`,
``tp_rate`` = :math:`\ln k`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["usl_log_eta", "saturating_log_eta", "CURVES", "log_eta"]


def usl_log_eta(n, log_sigma, log_kappa, m):
    """Log efficiency under the universal scalability law."""
    return -m.log1p(m.exp(log_sigma) * (n - 1.0) + m.exp(log_kappa) * n * (n - 1.0))


def saturating_log_eta(n, log_gain, log_rate, m):
    """Log efficiency under the saturating exponential (``log_gain`` = ln S_inf)."""
    speedup = 1.0 + (m.exp(log_gain) - 1.0) * (1.0 - m.exp(-m.exp(log_rate) * (n - 1.0)))
    return m.log(speedup) - m.log(n)


#: Registered curves: name -> (function, parameter names, default prior means).
CURVES = {
    "usl": (usl_log_eta, ("usl_sigma", "usl_kappa"), (-2.0, -4.0)),
    "saturating": (saturating_log_eta, ("tp_gain", "tp_rate"), (0.0, 0.0)),
}


def log_eta(n, curve, theta, m):
    """Log efficiency of each row under its strategy's curve.

    Parameters
    ----------
    n : array
        Device counts.
    curve : int array
        0 for single-device strategies (log efficiency 0), 1 for USL, 2 for
        the saturating exponential.
    theta : array (..., run, 4)
        Row-wise curve parameters in the order
        ``usl_sigma, usl_kappa, tp_gain, tp_rate``.
    m : module
        ``numpy`` or ``pytensor.tensor``.
    """
    if m.__name__ == "numpy":
        # evaluate each curve only on its own rows (posterior draws x candidates is large)
        out = np.zeros(np.broadcast_shapes(theta.shape[:-1], np.shape(n)))
        for kind, fn, (a, b) in ((1, usl_log_eta, (0, 1)), (2, saturating_log_eta, (2, 3))):
            rows = np.flatnonzero(curve == kind)
            if len(rows):
                out[..., rows] = fn(n[rows], theta[..., rows, a], theta[..., rows, b], np)
        return out
    usl = usl_log_eta(n, theta[..., 0], theta[..., 1], m)
    sat = saturating_log_eta(n, theta[..., 2], theta[..., 3], m)
    return m.where(m.equal(curve, 1), usl, m.where(m.equal(curve, 2), sat, 0.0 * n))
