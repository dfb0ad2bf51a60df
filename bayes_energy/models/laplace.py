r"""NUTS on coordinates whitened by the Laplace approximation at the posterior mode.

Every fit's chains start near the posterior mode (:func:`bayes_energy.models.sample.start_at_mode`).
The curvature there is nearly free: the Hessian :math:`H` of the negative log density, by central
differences of the compiled gradient (:math:`2d` gradient evaluations, ~0.2 s for the
hierarchical model's 308 unconstrained coordinates on the reference table). With :math:`H = V \Lambda V^\top` and the
eigenvalues floored at :data:`EIGEN_FLOOR`, the sampler draws

.. math::

    z, \qquad x = \hat x + W z, \qquad W = V \Lambda^{-1/2},

so that near the mode the posterior of :math:`z` is close to a standard normal. The log density
of :math:`z` is that of :math:`x` (:math:`W` is constant: no Jacobian term), its gradient
:math:`W^\top \nabla_x`, and every saved draw is :math:`x`'s, expanded by the model's own
function: the posterior is unchanged, only the sampler's coordinates move. nutpie's mass-matrix
adaptation (diagonal plus low rank) still runs, on :math:`z`.

Why: the log proxies are nearly collinear inside a cell, and until nutpie's low-rank mass matrix
has learnt those directions from warm-up draws, trees run to the depth cap: about half of a
harness split fit's leapfrog steps went to 300 warm-up iterations (``docs/speed.md``, sections 5
and 11). Started whitened, the harness's split fits took 2-4.5x fewer warm-up steps (section 18).

The wrapping is two numba ``cfunc``\ s around nutpie's own compiled log density and expand
functions. Every address they need (the mode, :math:`W`, the wrapped model's functions and data)
travels in a small array that replaces nutpie's user data, so one pair serves every model and
refit, and numba caches it on disk: ~4 s the first time on a machine, 0.4 s after (numba's cache
sits beside this file, or in its user-wide folder where that is read-only).
"""

from __future__ import annotations

import dataclasses
import functools

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["EIGEN_FLOOR", "INIT_SD", "hessian", "precondition", "whitening"]

#: Smallest eigenvalue of the Hessian kept (unconstrained units): a flat or concave direction at the
#: mode (a weakly identified speedup curve, an optimiser that stopped short) gets a scale of at most
#: 1 / sqrt(0.01) = 10, about the widest prior of the models on the unconstrained scale; nutpie's own
#: adaptation rescales from there.
EIGEN_FLOOR = 1e-2
#: Standard deviation of each chain's start around the mode, in whitened units (Laplace posterior sds). 1.0
#: left a harness split's chain stuck far along a speedup curve's ridge where 0.3 did not (docs/speed.md, section 18).
INIT_SD = 0.3


def hessian(neg_logp_grad, x: np.ndarray, step: float = 1e-5) -> np.ndarray:
    """Symmetrised Hessian of the negative log density at ``x`` by central differences of its gradient.

    ``neg_logp_grad(x) -> (value, gradient)`` of the negative log density
    (:func:`bayes_energy.models.sample._logp_and_gradient`).
    """
    n = x.size
    H = np.empty((n, n))
    e = np.zeros(n)
    for j in range(n):
        e[j] = step
        H[:, j] = (neg_logp_grad(x + e)[1] - neg_logp_grad(x - e)[1]) / (2.0 * step)
        e[j] = 0.0
    return 0.5 * (H + H.T)


def whitening(H: np.ndarray, floor: float = EIGEN_FLOOR) -> np.ndarray | None:
    """:math:`W = V \\Lambda^{-1/2}` of the floored eigendecomposition of ``H``; None when ``H`` is not finite."""
    if not np.all(np.isfinite(H)):
        return None
    lam, V = np.linalg.eigh(H)
    return np.ascontiguousarray(V / np.sqrt(np.maximum(lam, floor)))


# The wrappers' user data (int64, built by precondition): [0] the wrapped model's user data, [1] the mode, [2] W,
# [3] the dimension, [4] and [5] the wrapped model's compiled log density and expand function, all but [3] addresses.
_F64P = types.CPointer(types.float64)
_DOUBLE_P, _I64, _I8P = ir.DoubleType().as_pointer(), ir.IntType(64), ir.IntType(8).as_pointer()


@intrinsic
def _f64_ptr(typingctx, addr):
    def codegen(cgctx, builder, sig, args):
        return builder.inttoptr(args[0], cgctx.get_value_type(_F64P))
    return _F64P(addr), codegen


@intrinsic
def _i64_ptr(typingctx, ptr):
    target = types.CPointer(types.int64)

    def codegen(cgctx, builder, sig, args):
        return builder.bitcast(args[0], cgctx.get_value_type(target))
    return target(ptr), codegen


def _caller(*arg_types):
    """An intrinsic ``call(address, a, b, c, d, user_data) -> int64`` of a C function
    ``int64 f(a, b, c, d, void *user_data)`` with ``arg_types``; ``user_data`` is passed as an address (int64)."""
    fnty = ir.FunctionType(_I64, [*arg_types, _I8P])

    @intrinsic
    def call(typingctx, fn, a, b, c, d, ud):
        def codegen(cgctx, builder, sig, llargs):
            ptr = builder.inttoptr(llargs[0], fnty.as_pointer())
            return builder.call(ptr, [*llargs[1:5], builder.inttoptr(llargs[5], _I8P)])
        return types.int64(fn, a, b, c, d, ud), codegen
    return call


_call_logp = _caller(_I64, _DOUBLE_P, _DOUBLE_P, _DOUBLE_P)
_call_expand = _caller(_I64, _I64, _DOUBLE_P, _DOUBLE_P)


@numba.njit(cache=True)
def _unwhiten(dim, z_, user_data_):
    """The user data, W and x = mode + W z; an empty x when ``dim`` is not the model's dimension."""
    ud = numba.carray(_i64_ptr(user_data_), (6,))
    n = ud[3]
    if dim != n:
        return ud, np.empty((0, 0)), np.empty(0)
    W = numba.carray(_f64_ptr(ud[2]), (n, n))
    return ud, W, numba.carray(_f64_ptr(ud[1]), (n,)) + W @ numba.carray(z_, (n,))


def _logp(dim, z_, grad_, logp_, user_data_):
    ud, W, x = _unwhiten(dim, z_, user_data_)
    if x.size == 0:
        return -1
    grad_x = np.empty(x.size)
    rc = _call_logp(ud[4], dim, _f64_ptr(x.ctypes.data), _f64_ptr(grad_x.ctypes.data), logp_, ud[0])
    if rc != 0:
        return rc
    numba.carray(grad_, (x.size,))[:] = W.T @ grad_x
    return 0


def _expand(dim, expanded, z_, out_, user_data_):
    ud, _, x = _unwhiten(dim, z_, user_data_)
    if x.size == 0:
        return -1
    return _call_expand(ud[5], dim, expanded, _f64_ptr(x.ctypes.data), out_, ud[0])


@functools.cache
def _wrappers():
    """The whitened log density and expand ``cfunc``\\ s, compiled once per machine (numba's disk cache).

    They read every address from the user data, so no model's constants are compiled in: one pair serves
    every model, and numba can cache it.
    """
    return (numba.cfunc(types.int64(types.uint64, _F64P, _F64P, _F64P, types.voidptr), cache=True)(_logp),
            numba.cfunc(types.int64(types.uint64, types.uint64, _F64P, _F64P, types.voidptr), cache=True)(_expand))


class _UserData(np.ndarray):
    """The wrappers' user data; holds on to the arrays its addresses point at."""

    keep: tuple = ()


def precondition(compiled, mode: np.ndarray, W: np.ndarray, init_sd: float = INIT_SD):
    """``compiled`` (nutpie, numba backend) sampled on :math:`z` with :math:`x = \\hat x + W z`.

    Each chain starts at :math:`z \\sim \\mathcal N(0, \\texttt{init\\_sd}^2)` from its own seed,
    near the mode. The returned model expands draws to the original variables; it cannot be refitted
    with ``with_data`` (precondition the refitted model instead).
    """
    logp, expand = _wrappers()
    mode = np.ascontiguousarray(mode, dtype=np.float64)
    W = np.ascontiguousarray(W, dtype=np.float64)
    n = compiled.n_dim
    if mode.shape != (n,) or W.shape != (n, n):
        raise ValueError(f"mode {mode.shape} and W {W.shape} do not match the model's {n} coordinates")
    ud = np.array([compiled.user_data.ctypes.data, mode.ctypes.data, W.ctypes.data, n,
                   compiled.compiled_logp_func.address, compiled.compiled_expand_func.address],
                  dtype=np.int64).view(_UserData)
    ud.keep = (compiled.user_data, mode, W, compiled.compiled_logp_func, compiled.compiled_expand_func)

    def near_mode(chain_seed):
        return np.random.default_rng(chain_seed).normal(0.0, init_sd, size=n)

    return dataclasses.replace(compiled, compiled_logp_func=logp, compiled_expand_func=expand, user_data=ud,
                               initial_point_func=near_mode)
