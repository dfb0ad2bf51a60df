r"""Carbon and cost of a run: every energy draw times PUE times grid intensity, or times a price.

For each posterior-predictive energy draw :math:`E_s` (joules, as everywhere in
the package)

.. math::

    \mathrm{CO_2e}_s\,[\mathrm{kg}] = \frac{E_s}{3.6\times10^6}\,\mathrm{PUE}_s\,
        \frac{I_s}{1000}, \qquad
    \mathrm{cost}_s = \frac{E_s}{3.6\times10^6}\,\mathrm{PUE}_s\,\pi_s,

with the grid intensity :math:`I` in gCO2e/kWh, the price :math:`\pi` per kWh
drawn from the grid and the power usage effectiveness PUE (facility energy
over IT energy, >= 1). The predicted energy is what the devices draw (the
measured quantity of the training data); PUE adds cooling and power
conversion, so the facility's energy is :math:`E \times \mathrm{PUE}`.

Each factor is an :class:`Uncertain`: a number, or a mean and a standard
deviation (``"1.2+-0.1"``). A spread is drawn as a **lognormal of the excess
over the factor's lower bound** with that mean and standard deviation
(moment matched): the intensity and the price are lognormal (positive), the
PUE is 1 plus a lognormal (never below 1). One factor draw goes with one
energy draw and is shared by every candidate of a site, so candidates in one
place are compared without the factor's noise, and places with each other
with it.

The table of grid intensities, ``bayes_energy/data/grid_intensity.csv``
(:func:`load_grid_intensity`), holds **annual averages** of the generation
in a country or grid region, with year, basis (lifecycle or direct) and
source on every row. The intensity at the hours a job runs can differ from
the annual average by tens of percent (more where gas or coal sets the
margin); none of the sources gives a spread of the average, so the table's
``sd_gco2e_per_kwh`` is empty and a region is a point value. Give
``--grid-gco2-per-kwh MEAN+-SD`` (or your own table, ``--grid-table``, with
the column filled) to carry that variation.

Command line: ``python -m bayes_energy.carbon [--region FR]`` prints the
table. ``predict``, ``plan`` and ``report`` take ``--region`` or
``--grid-gco2-per-kwh``, ``--pue``, ``--price-per-kwh`` and ``--currency``
(:func:`add_site_arguments`).

Examples
--------
>>> import numpy as np
>>> float(to_co2e(np.array([3.6e6]), 400.0, pue=1.5)[0])  # 1 kWh at the plug, PUE 1.5, 400 g/kWh
0.6
>>> Uncertain.parse("1.2+-0.1", lower=1.0)
Uncertain(mean=1.2, sd=0.1, lower=1.0)
>>> grid_intensity("fr").mean
56.0
"""

from __future__ import annotations

import argparse
import difflib
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd

from .cli import nonnegative_float
from .schema import KWH_TO_J

__all__ = ["Uncertain", "Site", "to_co2e", "to_cost", "convert", "carbon_columns", "with_carbon", "cross_sites",
           "load_grid_intensity", "grid_intensity", "region_row", "add_site_arguments", "sites_from_args",
           "factor_rng", "ANNUAL_AVERAGE_NOTE"]

#: What a region's intensity is, said wherever one is used.
ANNUAL_AVERAGE_NOTE = ("grid intensities of the table are annual averages of generation in the region, not the "
                       "intensity at the hours a job runs (that can differ by tens of percent)")
#: Columns a grid-intensity table must have.
TABLE_COLUMNS = ("region", "year", "gco2e_per_kwh", "source")
_PM = re.compile(r"^\s*([^\s+±]+?)\s*(?:\+-|\+/-|±)\s*([^\s%]+?)\s*(%?)\s*$")
_CHUNK = 1 << 20  # elements per block when summarising (sample x candidate)


# --------------------------------------------------------------------------- uncertain factors
@dataclass(frozen=True)
class Uncertain:
    """A factor (>= ``lower``) known as a number or as a mean and standard deviation.

    Parameters
    ----------
    mean : float
        The factor's mean.
    sd : float, default 0
        Its standard deviation; 0 makes it a number.
    lower : float, default 0
        The lowest value it can take (1 for a PUE). With ``sd > 0`` the
        excess ``value - lower`` is lognormal with mean ``mean - lower`` and
        standard deviation ``sd``.

    Examples
    --------
    >>> u = Uncertain(0.3, 0.05)
    >>> rng = np.random.default_rng(0)
    >>> round(float(u.draws(200_000, rng).mean()), 2), round(float(u.draws(200_000, rng).std()), 2)
    (0.3, 0.05)
    """

    mean: float
    sd: float = 0.0
    lower: float = 0.0

    def __post_init__(self) -> None:
        for name in ("mean", "sd", "lower"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number, got {v!r}")
            object.__setattr__(self, name, float(v))
        if self.mean < self.lower:
            raise ValueError(f"the mean {self.mean:g} is below the lowest possible value {self.lower:g}")
        if self.sd < 0:
            raise ValueError(f"the standard deviation must be >= 0, got {self.sd:g}")
        if self.sd > 0 and self.mean == self.lower:
            raise ValueError(f"a spread needs a mean above {self.lower:g}, got {self.mean:g}+-{self.sd:g}")

    @classmethod
    def parse(cls, text: str | float | Uncertain, lower: float = 0.0) -> Uncertain:
        """Read ``"0.35"``, ``"0.35+-0.05"`` (also ``±`` or ``+/-``) or ``"0.35+-10%"`` (sd relative to the mean).

        Raises
        ------
        ValueError
            With a one-line message saying what was expected.
        """
        if isinstance(text, Uncertain):
            return cls(text.mean, text.sd, lower) if text.lower != lower else text
        if isinstance(text, (int, float, np.floating, np.integer)) and not isinstance(text, bool):
            return cls(float(text), 0.0, lower)
        s = str(text).strip()
        m = _PM.match(s)
        try:
            if m:
                mean, sd = float(m.group(1)), float(m.group(2))
                if m.group(3):
                    sd = sd / 100 * mean
            else:
                mean, sd = float(s), 0.0
        except ValueError:
            raise ValueError(f"expected a number or MEAN+-SD (e.g. 0.35 or 0.35+-0.05), got {s!r}") from None
        if not (math.isfinite(mean) and math.isfinite(sd)):
            raise ValueError(f"expected finite numbers, got {s!r}")
        return cls(mean, sd, lower)

    @property
    def is_point(self) -> bool:
        """Whether the factor is a plain number."""
        return self.sd == 0

    def _lognormal(self) -> tuple[float, float]:
        m = self.mean - self.lower
        s2 = math.log1p((self.sd / m) ** 2)
        return math.log(m) - s2 / 2, math.sqrt(s2)

    def draws(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` draws (the mean ``n`` times for a number)."""
        if self.is_point:
            return np.full(n, self.mean)
        mu, sigma = self._lognormal()
        return self.lower + np.exp(mu + sigma * rng.standard_normal(n))

    def interval(self, prob: float) -> tuple[float, float]:
        """The central ``prob`` interval of the factor itself (exact, from the lognormal)."""
        if self.is_point:
            return self.mean, self.mean
        mu, sigma = self._lognormal()
        z = NormalDist().inv_cdf((1 + prob) / 2)
        return self.lower + math.exp(mu - z * sigma), self.lower + math.exp(mu + z * sigma)

    def text(self, prob: float | None = None) -> str:
        """``"1.2"`` or ``"1.2+-0.1"``, with the central interval when ``prob`` is given and there is a spread."""
        if self.is_point:
            return f"{self.mean:.6g}"
        out = f"{self.mean:.6g}+-{self.sd:.4g}"
        if prob is not None:
            lo, hi = self.interval(prob)
            out += f" ({prob:.0%}: {lo:.4g}-{hi:.4g})"
        return out

    def __str__(self) -> str:
        return self.text()


def _as(value, lower: float) -> Uncertain:
    return value if isinstance(value, Uncertain) and value.lower == lower else Uncertain.parse(value, lower=lower)


# --------------------------------------------------------------------------- the table
def load_grid_intensity(path: str | Path | None = None) -> pd.DataFrame:
    """The table of grid carbon intensities, indexed by ``region``.

    The values are ANNUAL AVERAGES of the electricity generated in each
    country or grid region (gCO2e per kWh), not the intensity at the hours
    a job runs, nor of the electricity consumed there (imports and
    transmission losses are not counted). Each row names its year, its
    basis (``lifecycle``: including the plants' construction and fuel supply,
    Ember's method; ``direct``: at the plant only, eGRID's and DESNZ's) and
    its source; ``notes`` flags values transcribed with less certainty.
    The values were transcribed without access to the sources in this
    environment: check a row against its source before citing it.

    Parameters
    ----------
    path : path, optional
        Your own table with the same columns (at least ``region``, ``year``,
        ``gco2e_per_kwh``, ``source``; ``sd_gco2e_per_kwh`` optional).
        Default the shipped table.

    Returns
    -------
    pandas.DataFrame
        Columns ``name``, ``kind``, ``year``, ``gco2e_per_kwh``,
        ``sd_gco2e_per_kwh`` (NaN: no spread given), ``basis``, ``source``,
        ``notes``.

    Raises
    ------
    bayes_energy.schema.SchemaError
        A user table with a missing column, a bad number (file, row and
        column named) or a region given twice.
    """
    from .schema import SchemaError

    if path is None:
        with resources.files("bayes_energy").joinpath("data/grid_intensity.csv").open("r", encoding="utf-8") as fh:
            df = pd.read_csv(fh, dtype={"region": str})
        where = "grid_intensity.csv"
    else:
        from .datasets import read_csv

        df = read_csv(path, what="grid-intensity table")
        where = str(path)
    missing = [c for c in TABLE_COLUMNS if c not in df.columns]
    if missing:
        raise SchemaError(f"{where}: missing column(s) {', '.join(missing)}; a grid-intensity table needs "
                          f"{', '.join(TABLE_COLUMNS)} (sd_gco2e_per_kwh, basis, notes optional)")
    for col in ("name", "kind", "basis", "notes"):
        if col not in df.columns:
            df[col] = ""
    if "sd_gco2e_per_kwh" not in df.columns:
        df["sd_gco2e_per_kwh"] = np.nan
    df["region"] = df["region"].astype(str).str.strip()
    for col, required in (("gco2e_per_kwh", True), ("sd_gco2e_per_kwh", False), ("year", True)):
        values = pd.to_numeric(df[col], errors="coerce")
        bad = (values.isna() & (required | df[col].notna())) | (values < 0)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise SchemaError(f"{where}: row {i + 2}, column {col!r}: expected a number >= 0, "
                              f"got {str(df[col].iloc[i])!r}")
        df[col] = values.astype(float)
    dup = df["region"][df["region"].str.upper().duplicated()]
    if len(dup):
        raise SchemaError(f"{where}: region {dup.iloc[0]!r} appears more than once")
    df["year"] = df["year"].astype(int)
    for col in ("name", "kind", "basis", "source", "notes"):
        df[col] = df[col].fillna("").astype(str)
    return df.set_index("region")


def region_row(region: str, table: pd.DataFrame | None = None) -> pd.Series:
    """The table's row of ``region`` (its code or its name, any case).

    Raises
    ------
    ValueError
        For an unknown region, naming the closest matches.
    """
    table = load_grid_intensity() if table is None else table
    want = str(region).strip().lower()
    for code, row in table.iterrows():
        if want in (str(code).lower(), str(row["name"]).lower()):
            return row.rename(code)
    names = {str(c).lower(): str(c) for c in table.index} | {str(n).lower(): str(c) for c, n in table["name"].items() if n}
    close = []
    for hit in difflib.get_close_matches(want, list(names), n=5, cutoff=0.5):
        if names[hit] not in close:
            close.append(names[hit])
    close += [str(c) for c in table.index if want and want in str(c).lower() and str(c) not in close]
    hint = f"; close matches: {', '.join(close[:4])}" if close else ""
    raise ValueError(f"unknown region {region!r}{hint}. Known: {', '.join(map(str, table.index))} "
                     "(python -m bayes_energy.carbon lists them with sources), or give --grid-gco2-per-kwh")


def grid_intensity(region: str, table: pd.DataFrame | None = None) -> Uncertain:
    """A region's annual-average grid intensity (gCO2e/kWh); a spread only where the table gives one."""
    return _row_intensity(region_row(region, table))


def _row_intensity(row: pd.Series) -> Uncertain:
    sd = float(row["sd_gco2e_per_kwh"])
    return Uncertain(float(row["gco2e_per_kwh"]), sd if np.isfinite(sd) else 0.0)


# --------------------------------------------------------------------------- sites
@dataclass(frozen=True)
class Site:
    """Where a job runs: the grid's carbon intensity, the data centre's PUE, the electricity price.

    Parameters
    ----------
    intensity : Uncertain, float or str, optional
        Grid intensity in gCO2e/kWh; None: no CO2e.
    pue : Uncertain, float or str, default 1
        Power usage effectiveness, >= 1.
    price : Uncertain, float or str, optional
        Price per kWh drawn from the grid, in ``currency``; None: no cost.
    currency : str
        A label for the price (e.g. ``EUR``).
    name : str
        The region code, or a label.
    source, year, basis : str, int, str
        Where the intensity comes from, its year and basis (filled by
        :meth:`from_region`).
    annual_average : bool
        Whether the intensity is an annual average (the shipped table's are).
    """

    intensity: Uncertain | None = None
    pue: Uncertain = field(default_factory=lambda: Uncertain(1.0, lower=1.0))
    price: Uncertain | None = None
    currency: str = ""
    name: str = ""
    source: str = ""
    year: int | None = None
    basis: str = ""
    annual_average: bool = False

    def __post_init__(self) -> None:
        try:
            pue = _as(self.pue, 1.0)
        except ValueError as err:
            raise ValueError(f"PUE (facility energy / IT energy, >= 1): {err}") from None
        object.__setattr__(self, "pue", pue)
        for attr, what in (("intensity", "grid intensity (gCO2e/kWh, >= 0)"), ("price", "price per kWh (>= 0)")):
            v = getattr(self, attr)
            if v is not None:
                try:
                    object.__setattr__(self, attr, _as(v, 0.0))
                except ValueError as err:
                    raise ValueError(f"{what}: {err}") from None
        if self.intensity is None and self.price is None:
            raise ValueError("a site needs a grid intensity (--region or --grid-gco2-per-kwh) or a price "
                             "(--price-per-kwh): PUE alone converts nothing")

    @classmethod
    def from_region(cls, region: str, pue=1.0, price=None, currency: str = "",
                    table: pd.DataFrame | None = None) -> Site:
        """A site on the grid of ``region``: a row of :func:`load_grid_intensity` (the shipped table, or ``table``)."""
        row = region_row(region, table)
        return cls(intensity=_row_intensity(row), pue=pue, price=price, currency=currency, name=str(row.name),
                   source=str(row["source"]), year=int(row["year"]), basis=str(row["basis"]),
                   annual_average=table is None)

    @property
    def label(self) -> str:
        """The region code, or a short description of a site without one."""
        if self.name:
            return self.name
        if self.intensity is not None:
            return f"{self.intensity} g/kWh"
        return f"{self.price} {self.currency}/kWh" if self.currency else f"{self.price}/kWh"

    def describe(self, prob: float = 0.9) -> str:
        """One line: the site's factors, their sources and the annual-average caveat."""
        parts = []
        if self.intensity is not None:
            s = f"grid {self.intensity.text(prob)} gCO2e/kWh"
            if self.year is not None:
                s += (f" ({'ANNUAL AVERAGE ' if self.annual_average else ''}{self.year}"
                      f"{', ' + self.basis if self.basis else ''}; {self.source})")
            elif self.source:
                s += f" ({self.source})"
            parts.append(s)
        parts.append(f"PUE {self.pue.text(prob)}")
        if self.price is not None:
            parts.append(f"price {self.price.text(prob)} {self.currency + '/kWh' if self.currency else 'per kWh'}")
        spread = [n for n, u in (("grid", self.intensity), ("PUE", self.pue), ("price", self.price))
                  if u is not None and not u.is_point]
        if spread:
            parts.append(f"spreads ({', '.join(spread)}) drawn lognormal{' (PUE as 1 + lognormal)' if 'PUE' in spread else ''}")
        return f"{self.label}: " + "; ".join(parts)

    def factor_draws(self, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """``pue`` and, where given, ``intensity`` and ``price``: ``n`` draws each (one PUE draw shared by both)."""
        out = {"pue": self.pue.draws(n, rng)}
        if self.intensity is not None:
            out["intensity"] = self.intensity.draws(n, rng)
        if self.price is not None:
            out["price"] = self.price.draws(n, rng)
        return out


# --------------------------------------------------------------------------- conversions
def _factor(values: np.ndarray, energy: np.ndarray) -> np.ndarray:
    """Factor draws (sample,) shaped to broadcast over ``energy`` (sample, ...)."""
    return values.reshape((-1,) + (1,) * (energy.ndim - 1))


def _draws_of(u: Uncertain, n: int, rng) -> np.ndarray:
    if not u.is_point and rng is None:
        raise ValueError("a factor with a spread needs rng (a numpy Generator) for its draws")
    return u.draws(n, rng)


def to_co2e(energy_j, intensity, pue=1.0, rng: np.random.Generator | None = None) -> np.ndarray:
    """kg CO2e of energy draws: ``E / 3.6e6 x PUE x intensity / 1000``.

    Parameters
    ----------
    energy_j : array_like
        Energy draws in joules, (sample, ...): the draws of one or more
        candidates (e.g. ``np.exp(predict_draws(...)["log_energy_j"])``).
    intensity : Uncertain, float or str
        Grid intensity, gCO2e/kWh (e.g. :func:`grid_intensity`).
    pue : Uncertain, float or str, default 1
    rng : numpy.random.Generator, optional
        Needed when a factor has a spread: one factor draw per energy draw
        (along the first axis), shared by the other axes.

    Returns
    -------
    numpy.ndarray
        kg CO2e, the shape of ``energy_j``.
    """
    e = np.asarray(energy_j, float)
    i, p = _as(intensity, 0.0), _as(pue, 1.0)
    n = e.shape[0] if e.ndim else 1
    return e / KWH_TO_J * _factor(_draws_of(p, n, rng), e) * _factor(_draws_of(i, n, rng), e) / 1e3


def to_cost(energy_j, price, pue=1.0, rng: np.random.Generator | None = None) -> np.ndarray:
    """Cost of energy draws: ``E / 3.6e6 x PUE x price`` (the price's currency; see :func:`to_co2e`)."""
    e = np.asarray(energy_j, float)
    c, p = _as(price, 0.0), _as(pue, 1.0)
    n = e.shape[0] if e.ndim else 1
    return e / KWH_TO_J * _factor(_draws_of(p, n, rng), e) * _factor(_draws_of(c, n, rng), e)


def convert(energy_j, site: Site, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``co2e_kg`` and/or ``cost`` draws of energy draws at ``site`` (one PUE draw serves both)."""
    e = np.asarray(energy_j, float)
    f = site.factor_draws(e.shape[0], rng)
    kwh = e / KWH_TO_J * _factor(f["pue"], e)
    out = {}
    if "intensity" in f:
        out["co2e_kg"] = kwh * _factor(f["intensity"], e) / 1e3
    if "price" in f:
        out["cost"] = kwh * _factor(f["price"], e)
    return out


def factor_rng(seed: int | None) -> np.random.Generator:
    """The random stream of the factor draws for a command's ``--seed`` (its own stream, not the energy draws')."""
    return np.random.default_rng(None if seed is None else [abs(int(seed)), 14])


def carbon_columns(log_energy_j: np.ndarray, site: Site, prob: float, rng: np.random.Generator) -> pd.DataFrame:
    """Mean, median and central ``prob`` interval of CO2e (kg) and cost per candidate.

    Parameters
    ----------
    log_energy_j : numpy.ndarray
        (sample, candidate) draws of ln energy in joules, as
        :func:`bayes_energy.predict.predict_draws` returns them.
    site : Site
    prob : float
    rng : numpy.random.Generator

    Returns
    -------
    pandas.DataFrame
        ``co2e_kg_{mean,median,lo,hi}`` (with an intensity) and
        ``cost_{mean,median,lo,hi}`` (with a price), one row per candidate.
        Quantiles are taken on the log scale, as for energy; like energy's,
        the mean rests on the heavy tail and is for the record only.
    """
    from .predict import summarize_draws

    S, n = log_energy_j.shape
    f = site.factor_draws(S, rng)
    with np.errstate(divide="ignore"):  # an intensity or price of 0 has log -inf: the result is 0
        base = np.log(f["pue"]) - np.log(KWH_TO_J)
        shifts = {}
        if "intensity" in f:
            shifts["co2e_kg"] = base + np.log(f["intensity"]) - np.log(1e3)
        if "price" in f:
            shifts["cost"] = base + np.log(f["price"])
    width = max(1, _CHUNK // max(S, 1))
    parts = {k: [] for k in shifts}
    for start in range(0, n, width):
        block = log_energy_j[:, start:start + width]
        for k, shift in shifts.items():
            parts[k].append(summarize_draws(block + shift[:, None], prob, k, log=True))
    return pd.concat([pd.concat(v, ignore_index=True) for v in parts.values()], axis=1)


def with_carbon(pred: pd.DataFrame, draws: dict, site: Site, prob: float, seed: int | None = None) -> pd.DataFrame:
    """A :func:`bayes_energy.predict.predict` table with CO2e and cost columns added.

    ``draws`` is the draws dict that ``predict(..., return_draws=True)``
    returns with the table. Adds ``region``, ``grid_gco2e_per_kwh``, ``pue``,
    ``price_per_kwh`` and ``currency`` (the inputs, ``MEAN+-SD`` where spread)
    and the columns of :func:`carbon_columns`.

    Examples
    --------
    >>> pred, draws = predict(idata, candidates, return_draws=True)  # doctest: +SKIP
    >>> with_carbon(pred, draws, Site.from_region("FR", pue="1.2+-0.1"), prob=0.9)  # doctest: +SKIP
    """
    cols = carbon_columns(draws["log_energy_j"], site, prob, factor_rng(seed))
    info = pd.DataFrame({
        "region": site.label,
        "grid_gco2e_per_kwh": "" if site.intensity is None else str(site.intensity),
        "pue": str(site.pue),
        "price_per_kwh": "" if site.price is None else str(site.price),
        "currency": site.currency,
    }, index=range(len(pred)))
    return pd.concat([pred.reset_index(drop=True), info, cols], axis=1)


def cross_sites(cands: pd.DataFrame, energy_j: np.ndarray, time_s: np.ndarray, sites: Sequence[Site],
                rng: np.random.Generator) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Cross candidates with sites: the same joint energy and time draws at each site, converted there.

    Returns
    -------
    (candidates, energy_j, time_s, converted)
        The candidates repeated per site (site after site) with a ``region``
        column; their energy and time draws (sample, candidate x site); and
        ``co2e_kg`` and/or ``cost`` draws of the same shape (every site
        must have an intensity, or none; the same for a price). Candidates
        of one site share its factor draws.
    """
    sites = list(sites)
    if not sites:
        raise ValueError("cross_sites needs at least one site")
    labels = [s.label for s in sites]
    for attr, what in (("intensity", "a grid intensity"), ("price", "a price")):
        given = [getattr(s, attr) is not None for s in sites]
        if any(given) and not all(given):
            raise ValueError(f"either every site has {what} or none: {', '.join(labels)}")
    if len(set(labels)) < len(labels):
        raise ValueError(f"sites must differ in name, got {', '.join(labels)}")
    S = energy_j.shape[0]
    out_c = pd.concat([cands.assign(region=s.label) for s in sites], ignore_index=True)
    conv = {k: np.full((S, energy_j.shape[1] * len(sites)), np.nan) for k in ("co2e_kg", "cost")}
    n = energy_j.shape[1]
    for j, s in enumerate(sites):
        for k, v in convert(energy_j, s, rng).items():
            conv[k][:, j * n:(j + 1) * n] = v
    conv = {k: v for k, v in conv.items() if not np.isnan(v).all()}
    return out_c, np.tile(energy_j, (1, len(sites))), np.tile(time_s, (1, len(sites))), conv


# --------------------------------------------------------------------------- command-line options
def _option(lower: float, what: str, bound: str):
    def parse(text: str) -> Uncertain:
        m = _PM.match(str(text))
        try:
            mean = nonnegative_float(m.group(1) if m else text)  # cli's checked number: finite, >= 0
            if m:
                nonnegative_float(m.group(2))
        except argparse.ArgumentTypeError as err:
            raise argparse.ArgumentTypeError(f"{what}: {err} (a number or MEAN+-SD, e.g. 1.2+-0.1)") from None
        if mean < lower:
            raise argparse.ArgumentTypeError(f"expected {what} {bound}, got {text!r}")
        try:
            return Uncertain.parse(text, lower=lower)
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"{what}: {err}") from None

    parse.__doc__ = f"argparse type: {what} {bound}, a number or MEAN+-SD."
    return parse


#: argparse types: a number or ``MEAN+-SD``, checked against its lower bound.
pue_option = _option(1.0, "a PUE", ">= 1 (facility energy / IT energy)")
intensity_option = _option(0.0, "a grid intensity", ">= 0 gCO2e/kWh")
price_option = _option(0.0, "a price", ">= 0 per kWh")


def add_site_arguments(parser: argparse.ArgumentParser, multiple: bool = False) -> None:
    """Add ``--region`` / ``--grid-gco2-per-kwh``, ``--grid-table``, ``--pue``, ``--price-per-kwh``, ``--currency``.

    With ``multiple`` each takes several values (one site per region); ``--pue``
    and ``--price-per-kwh`` then take one value for all or one per site.
    """
    nargs = "+" if multiple else None
    g = parser.add_argument_group("carbon and cost (see python -m bayes_energy.carbon)")
    where = g.add_mutually_exclusive_group()
    where.add_argument("--region", nargs=nargs, metavar="REGION",
                       help="grid region(s) of the shipped table (e.g. FR, DE, US-CAMX): its ANNUAL-AVERAGE intensity")
    where.add_argument("--grid-gco2-per-kwh", nargs=nargs, type=intensity_option, metavar="G",
                       help="grid intensity(ies) in gCO2e/kWh: a number or MEAN+-SD (lognormal)")
    g.add_argument("--grid-table", metavar="CSV", help="your own grid-intensity table for --region (same columns)")
    g.add_argument("--pue", nargs=nargs, type=pue_option, metavar="PUE",
                   help="data-centre PUE >= 1: a number or MEAN+-SD (1 + lognormal); default 1")
    g.add_argument("--price-per-kwh", nargs=nargs, type=price_option, metavar="P",
                   help="electricity price per kWh (>= 0): a number or MEAN+-SD (lognormal)")
    g.add_argument("--currency", default="", help="label of the price's currency, e.g. EUR")


def sites_from_args(args: argparse.Namespace) -> list[Site]:
    """The sites the options of :func:`add_site_arguments` describe ([] when none is given).

    Raises
    ------
    ValueError
        A one-line message: an unknown region, ``--pue`` alone, lists of
        mismatched lengths.
    """
    def listed(v):
        return [] if v is None else (list(v) if isinstance(v, (list, tuple)) else [v])

    regions, grids = listed(args.region), listed(args.grid_gco2_per_kwh)
    pues, prices = listed(args.pue), listed(args.price_per_kwh)
    if args.grid_table and not regions:
        raise ValueError("--grid-table is read for --region; give --region too")
    n = max(len(regions), len(grids), 1)
    if not regions and not grids and not prices:
        if pues:
            raise ValueError("--pue applies to CO2e and cost: give --region or --grid-gco2-per-kwh, or --price-per-kwh")
        return []
    for opt, vals in (("--pue", pues), ("--price-per-kwh", prices)):
        if len(vals) not in (0, 1, n):
            raise ValueError(f"{opt}: give one value for all, or one per region ({n}), got {len(vals)}")
    table = load_grid_intensity(args.grid_table) if args.grid_table else None
    sites = []
    for j in range(n):
        pue = pues[j if len(pues) > 1 else 0] if pues else 1.0
        price = prices[j if len(prices) > 1 else 0] if prices else None
        if regions:
            sites.append(Site.from_region(regions[j], pue=pue, price=price, currency=args.currency, table=table))
        else:
            sites.append(Site(intensity=grids[j] if grids else None, pue=pue, price=price, currency=args.currency))
    if len({s.label for s in sites}) < len(sites):
        raise ValueError(f"the regions repeat: {', '.join(s.label for s in sites)}")
    return sites


def main(argv: list[str] | None = None) -> int:
    """``python -m bayes_energy.carbon [--region R] [--grid-table CSV]``: print the grid-intensity table."""
    from .cli import Parser, fail
    from .schema import SchemaError

    ap = Parser(prog="python -m bayes_energy.carbon", description="The table of annual-average grid intensities.")
    ap.add_argument("--region", help="show one region")
    ap.add_argument("--grid-table", metavar="CSV", help="your own table instead of the shipped one")
    args = ap.parse_args(argv)
    try:
        table = load_grid_intensity(args.grid_table)
        if args.region:
            table = region_row(args.region, table).to_frame().T
    except (SchemaError, ValueError) as err:
        return fail(err)
    print(f"Grid carbon intensity of generation, gCO2e/kWh. Note: {ANNUAL_AVERAGE_NOTE}. The shipped values were "
          "transcribed without access to the sources: check a row against its source before citing it.")
    for code, r in table.iterrows():
        sd = r["sd_gco2e_per_kwh"]
        value = f"{r['gco2e_per_kwh']:g}" + (f"+-{sd:g}" if np.isfinite(sd) else "")
        print(f"{code:<8} {value:>8} g/kWh  {int(r['year'])}  {r['basis'] or '?':<9}  {r['name']}")
        print(f"{'':<8} source: {r['source']}" + (f"; note: {r['notes']}" if r["notes"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
