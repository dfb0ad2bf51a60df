r"""Device specifications of GPUs, name lookup, and the roofline ratios a model can use.

The table
---------
``bayes_energy/data/gpu_specs.csv`` holds one row per GPU model (memory
variants that NVML reports under different names, e.g. V100 16 GB and
32 GB, have their own rows), indexed by ``gpu``:

============================ =====================================================
``vendor``                   NVIDIA or AMD
``architecture``, ``chip``   generation (Volta ... Hopper, CDNA 2/3) and die
``form_factor``              SXM2/SXM4/SXM5, PCIe, OAM
``release_year``             year of the vendor's launch announcement
``tdp_w``                    board power (TDP / TBP / TGP), W; the maximum of a
                             configurable range
``peak_16bit_dense_tflops``  peak dense 16-bit Tensor/matrix throughput, 1e12
                             FLOP/s, with FP32 accumulation (what mixed-precision
                             training uses): BF16 where the device has it, else
                             FP16 (``peak_16bit_dtype``). Never the with-sparsity
                             figure. GeForce cards run FP32 accumulation at half
                             their FP16-accumulate rate, and the half rate is
                             what is stored.
``peak_16bit_sparse_tflops`` the vendor's with-2:4-sparsity figure; empty where
                             the architecture has no structured sparsity
                             (Volta, Turing, CDNA 2)
``mem_bandwidth_gbs``        peak DRAM bandwidth, 1e9 byte/s
``mem_gb``                   DRAM size, GB as the vendor counts it
``aliases``                  ``;``-separated names as NVML / ROCm / CodeCarbon
                             report the device
``source``, ``status``,      the main vendor document, the row's weakest value
``notes``                    status, and caveats
============================ =====================================================

``bayes_energy/data/gpu_specs_sources.csv`` is its long companion: one row
per (``gpu``, ``column``) with the ``value``, the ``source`` document, a
``status`` and a ``cross_check`` (the chip arithmetic, units x FLOP per clock
x boost clock, or bus width x data rate, that the value agrees with).
``status`` is one of

- ``datasheet-recalled``: the figure printed in the named vendor document,
  as recalled from memory;
- ``recalled``: a launch year, recalled;
- ``derived``: computed from recalled figures (e.g. dense = the printed
  with-sparsity figure / 2 where the datasheet prints only that one);
- ``recalled-unsure``: recalled with a doubt stated in ``note``;
- ``not-applicable``: no such feature (sparsity before Ampere / CDNA 3).

Caveat, exactly: no value was checked against a vendor PDF. This
environment has no network access beyond package registries, so every value
was recalled from the cited NVIDIA/AMD datasheets and architecture
whitepapers, then cross-checked only for internal consistency (dense vs.
sparse figures, the chip arithmetic in ``cross_check``, pitfalls such as
GeForce half-rate FP32 accumulation and the MI250/MI250X difference). Values
marked ``recalled-unsure`` (H100 NVL, H200 NVL, L40, the L40S dense figure,
the RTX A6000 dense figure, MI300X's die code name) deserve a look at the
PDF before being relied on. ``gpu_specs_sources.csv`` says per value.

Roofline ratios
---------------
:func:`roofline` turns a row into two energy scales (SI units):

.. math::

    \epsilon_\mathrm{FLOP} = \frac{P_\mathrm{TDP}}{F_\mathrm{peak}}\ \mathrm{[J/FLOP]},
    \qquad
    \epsilon_\mathrm{byte} = \frac{P_\mathrm{TDP}}{B_\mathrm{peak}}\ \mathrm{[J/byte]}.

:math:`\epsilon_\mathrm{FLOP}` is the energy per FLOP of a device that
draws its full board power while computing at its peak dense 16-bit rate:
the ratio of two upper envelopes, power and throughput. A real run computes
at a fraction :math:`u` of peak while drawing :math:`P \le P_\mathrm{TDP}`,
so its energy per useful FLOP is :math:`\epsilon_\mathrm{FLOP} \cdot
(P/P_\mathrm{TDP})/u`, typically a few times the ratio (fine-tuning
reaches u ~ 0.2-0.6). The ratio is a hardware-level scale, not a strict
bound: a run beats it per FLOP only when its power falls further below TDP
than its throughput falls below peak (:math:`P/P_\mathrm{TDP} < u`), which
training workloads rarely do.
Likewise :math:`\epsilon_\mathrm{byte}` charges the whole board's power to
DRAM traffic at peak bandwidth; it is far above the DRAM's own access energy
(tens of pJ/byte) and is meant for memory-bound phases, up to utilisation.
``ridge_flop_per_byte`` = :math:`F_\mathrm{peak}/B_\mathrm{peak}` is the
roofline's machine balance. Models should use the natural logs, centred
across the hardware levels; the factors :math:`(P/P_\mathrm{TDP})/u` are
what their priors describe.

Power-limited parts (A100 and H100 PCIe, T4, L4) hold their peak clock only
until the board limit lowers it, so their ratio flatters them: the A100
PCIe 40GB (250 W) comes out below the A100 SXM4 (400 W) with the same peak.

Note on J/FLOP across generations: it falls with every data-centre step
(V100 -> A100 -> H100, T4 -> L4, MI250X -> MI300X), but not at every step
within a market tier: the RTX 3090 (350 W, 71 TFLOP/s) is above the
RTX 2080 Ti (250 W, 53.8), and the A10 above the T4.

Examples
--------
>>> specs = load_gpu_specs()
>>> float(specs.loc["A100-SXM4-40GB", "tdp_w"])
400.0
>>> lookup("Tesla V100-PCIE-16GB").name
'V100-PCIE-16GB'
>>> float(lookup("4 x NVIDIA GeForce RTX 2080 Ti")["peak_16bit_dense_tflops"])  # CodeCarbon's gpu_model
53.8
>>> match_gpu("NVIDIA A10G") is None
True
>>> rf = roofline(["NVIDIA A100-SXM4-40GB", "NVIDIA GeForce RTX 2080 Ti"])
>>> rf["log_j_per_flop"].round(2).tolist()
[-27.38, -26.09]
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from importlib import resources
from typing import Literal

import numpy as np
import pandas as pd

__all__ = ["SPEC_COLUMNS", "UnknownHardwareError", "load_gpu_specs", "load_gpu_spec_sources", "match_gpu",
           "lookup", "roofline"]

#: Numeric columns of the table, with units in the names.
SPEC_COLUMNS = ("release_year", "tdp_w", "peak_16bit_dense_tflops", "peak_16bit_sparse_tflops",
                "mem_bandwidth_gbs", "mem_gb")

#: Names a driver reports for more than one row: normalised name -> the rows it could be.
#: (Some ROCm versions name MI250X and MI250 GCDs alike.)
_AMBIGUOUS = {"mi250xmi250": ("MI250X", "MI250")}

#: CodeCarbon's ``gpu_model`` field prefixes the device count: ``"4 x NVIDIA A100-SXM4-40GB"``.
_COUNT_PREFIX = re.compile(r"^\s*\d+\s*x\s+", re.IGNORECASE)


class UnknownHardwareError(KeyError, ValueError):
    """A device name that matches no row of the spec table (or more than one).

    A subclass of both KeyError (a failed lookup) and ValueError (a bad
    argument), so either ``except`` catches it. ``close_matches`` holds the
    table keys whose names resemble the one asked for.
    """

    def __init__(self, message: str, name: str = "", close_matches: tuple[str, ...] = ()):
        super().__init__(message)
        self.message = message
        self.name = name
        self.close_matches = tuple(close_matches)

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.message


def _read(filename: str) -> pd.DataFrame:
    with resources.files("bayes_energy").joinpath(f"data/{filename}").open("r", encoding="utf-8") as fh:
        return pd.read_csv(fh)


def load_gpu_specs() -> pd.DataFrame:
    """The GPU specification table, indexed by ``gpu``.

    Returns
    -------
    pandas.DataFrame
        One row per GPU model: ``vendor``, ``architecture``, ``chip``,
        ``form_factor``, :data:`SPEC_COLUMNS` (floats; the sparse figure is
        NaN where the architecture has none), ``peak_16bit_dtype``,
        ``mem_type``, ``aliases``, ``source``, ``status``, ``notes``.

    See Also
    --------
    load_gpu_spec_sources : each value's source document and status.
    lookup : the row of a device name as NVML or CodeCarbon reports it.
    """
    df = _read("gpu_specs.csv")
    for col in SPEC_COLUMNS:
        df[col] = df[col].astype(float)
    return df.set_index("gpu")


def load_gpu_spec_sources() -> pd.DataFrame:
    """Per-value provenance of :func:`load_gpu_specs`: a long table.

    Returns
    -------
    pandas.DataFrame
        Columns ``gpu``, ``column``, ``value`` (as text), ``source``,
        ``status`` (see the module docstring), ``cross_check``, ``note``.
    """
    return _read("gpu_specs_sources.csv").fillna({"value": "", "cross_check": "", "note": ""})


def _norm(name: str) -> str:
    s = _COUNT_PREFIX.sub("", str(name)).lower()
    for word in ("nvidia", "geforce", "tesla", "amd", "instinct"):
        s = s.replace(word, "")
    return re.sub(r"[^a-z0-9]", "", s)


def _names(specs: pd.DataFrame) -> dict[str, str]:
    """Normalised key and alias -> table key."""
    out: dict[str, str] = {}
    for key, aliases in specs["aliases"].fillna("").items():
        for n in [key, *str(aliases).split(";")]:
            if n.strip():
                out.setdefault(_norm(n), key)
    return out


def match_gpu(name: str, specs: pd.DataFrame | None = None) -> str | None:
    """The table key for a device name (as NVML, ROCm or a dataset reports it), or None.

    Matching ignores case, punctuation, a CodeCarbon device-count prefix
    (``"4 x "``) and the words NVIDIA, GeForce, Tesla, AMD and Instinct, and
    compares against the key and every alias exactly: no fuzzy matching, so
    an ``A10G`` is not taken for an ``A10``. See :func:`lookup` for the
    raising variant.
    """
    specs = load_gpu_specs() if specs is None else specs
    return _names(specs).get(_norm(name))


def _close(name: str, specs: pd.DataFrame, n: int = 5) -> list[str]:
    names = _names(specs)
    want = _norm(name)
    # first the names containing what was asked (e.g. "H100" -> the three H100s), then difflib's
    hits = [k for k in names if want in k] if len(want) >= 2 else []
    hits += difflib.get_close_matches(want, list(names), n=3 * n, cutoff=0.6)
    return list(dict.fromkeys(names[h] for h in hits))[:n]


def lookup(name: str, specs: pd.DataFrame | None = None) -> pd.Series:
    """The spec-table row of a device name.

    Parameters
    ----------
    name : str
        The device name as NVML / ``torch.cuda.get_device_name`` (``"NVIDIA
        A100-SXM4-40GB"``, ``"Tesla V100-PCIE-16GB"``), ROCm (``"AMD Instinct
        MI300X"``), CodeCarbon's ``gpu_model`` (``"4 x NVIDIA GeForce RTX
        2080 Ti"``) or the table key (``"A100-SXM4-40GB"``) report it.
    specs : pandas.DataFrame, optional
        A table shaped like :func:`load_gpu_specs` (default: the packaged one).

    Returns
    -------
    pandas.Series
        The row; its ``.name`` is the table key.

    Raises
    ------
    UnknownHardwareError
        When no key or alias matches (the message lists close matches), or
        when the name is one a driver reports for several rows.

    Examples
    --------
    >>> lookup("NVIDIA H100 80GB HBM3").name
    'H100-SXM5-80GB'
    >>> lookup("NVIDIA H100")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    bayes_energy.hardware.UnknownHardwareError: unknown hardware 'NVIDIA H100': no row of the GPU spec table ...
    """
    specs = load_gpu_specs() if specs is None else specs
    key = match_gpu(name, specs)
    if key is not None:
        return specs.loc[key]
    want = _norm(name)
    if want in _AMBIGUOUS:
        rows = _AMBIGUOUS[want]
        raise UnknownHardwareError(
            f"hardware {name!r} is ambiguous: the driver reports this name for {' and '.join(rows)}, which differ "
            f"in peak FLOP/s; pass the table key ({' or '.join(map(repr, rows))}) instead", name, rows)
    close = _close(name, specs)
    hint = (f"close matches: {', '.join(map(repr, close))}" if close
            else f"known: {', '.join(map(repr, specs.index))}")
    raise UnknownHardwareError(
        f"unknown hardware {name!r}: no row of the GPU spec table (bayes_energy/data/gpu_specs.csv) has this name "
        f"or alias; {hint}. Add a row with its datasheet values, or an alias to an existing row", name, tuple(close))


def roofline(names: str | Iterable[str] | None = None, specs: pd.DataFrame | None = None,
             unknown: Literal["raise", "nan"] = "raise") -> pd.DataFrame:
    """Roofline energy scales per hardware: J/FLOP and J/byte at TDP and peak.

    Parameters
    ----------
    names : str or iterable of str, optional
        Device names as :func:`lookup` takes them (duplicates are dropped,
        order kept). Default: every row of the table, by key.
    specs : pandas.DataFrame, optional
        A table shaped like :func:`load_gpu_specs`.
    unknown : {"raise", "nan"}
        What an unknown name does: raise :class:`UnknownHardwareError`, or
        give a row of NaN with ``gpu`` empty (for a model that draws such
        hardware from its population).

    Returns
    -------
    pandas.DataFrame
        Indexed by ``hardware`` (the names as given), columns: ``gpu`` (table
        key), ``tdp_w``, ``peak_flop_per_s`` (dense 16-bit), ``mem_bandwidth_byte_per_s``,
        ``j_per_flop`` = TDP / peak FLOP/s, ``j_per_byte`` = TDP / bandwidth,
        ``log_j_per_flop``, ``log_j_per_byte`` (natural logs, uncentred) and
        ``ridge_flop_per_byte`` = peak FLOP/s / bandwidth. See the module
        docstring for what the ratios mean physically.

    Examples
    --------
    >>> rf = roofline("NVIDIA A100-SXM4-40GB")
    >>> float(rf["j_per_flop"].iloc[0])  # 400 W / 312e12 FLOP/s
    1.282051282051282e-12
    """
    specs = load_gpu_specs() if specs is None else specs
    if names is None:
        names = list(specs.index)
    elif isinstance(names, str):
        names = [names]
    names = list(dict.fromkeys(names))
    if unknown not in ("raise", "nan"):
        raise ValueError(f"unknown must be 'raise' or 'nan', got {unknown!r}")
    keys = []
    for n in names:
        if unknown == "raise":
            keys.append(lookup(n, specs).name)
        else:
            keys.append(match_gpu(n, specs))
    rows = specs.reindex([k if k is not None else "\0" for k in keys])
    out = pd.DataFrame(index=pd.Index(names, name="hardware"))
    out["gpu"] = [k if k is not None else "" for k in keys]
    out["tdp_w"] = rows["tdp_w"].to_numpy(float)
    out["peak_flop_per_s"] = rows["peak_16bit_dense_tflops"].to_numpy(float) * 1e12
    out["mem_bandwidth_byte_per_s"] = rows["mem_bandwidth_gbs"].to_numpy(float) * 1e9
    out["j_per_flop"] = out["tdp_w"] / out["peak_flop_per_s"]
    out["j_per_byte"] = out["tdp_w"] / out["mem_bandwidth_byte_per_s"]
    out["log_j_per_flop"] = np.log(out["j_per_flop"])
    out["log_j_per_byte"] = np.log(out["j_per_byte"])
    out["ridge_flop_per_byte"] = out["peak_flop_per_s"] / out["mem_bandwidth_byte_per_s"]
    return out
