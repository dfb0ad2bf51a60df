"""Save and load fitted posteriors (netCDF only, never pickle).

A saved file describes itself: :func:`load` reads the model name and config
from its attrs and the training table from its ``training_table`` group, and
refuses a file whose training table no longer matches its stored hash or
whose config lacks keys this version needs (naming the version that wrote
it); a file from another version that passes both loads with a warning. It
can also rebuild the PyMC model. Nothing in the file is ever unpickled or
evaluated: netCDF holds arrays and text attributes only, and the config is
read with ``json.loads``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path

import arviz as az
import numpy as np
import pandas as pd

from .. import __version__
from ..schema import REQUIRED
from .spec import ModelSpec

__all__ = ["save", "load", "load_posterior", "posterior_of", "Posterior", "load_spec", "training_table",
           "sample_array", "table_hash", "PosteriorFileError", "VersionWarning"]


class PosteriorFileError(ValueError):
    """A file is not a bayes_energy posterior, or its contents do not match."""


class VersionWarning(UserWarning):
    """A posterior was written by another version of bayes_energy (and is compatible)."""


def table_hash(df: pd.DataFrame) -> str:
    """SHA-256 of the schema columns of a training table (order-sensitive)."""
    cols = [c for c in REQUIRED if c in df.columns]
    text = df[cols].to_csv(index=False, float_format="%.10g")
    return hashlib.sha256(text.encode()).hexdigest()


def save(idata: az.InferenceData, path: str | os.PathLike) -> Path:
    """Write ``idata`` to ``path`` atomically (temporary file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".nc.tmp")
    os.close(fd)
    try:
        idata.to_netcdf(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def training_table(idata: az.InferenceData) -> pd.DataFrame:
    """The training table stored in a posterior."""
    if "training_table" not in idata.groups():
        raise PosteriorFileError("the posterior has no training_table group; was it written by bayes_energy?")
    df = idata["training_table"].to_dataframe().reset_index(drop=True)
    for col in df.columns:
        if df[col].dtype == object:
            df[col] = df[col].astype(str)
    return df


def sample_array(da) -> np.ndarray:
    """(sample, ...) numpy array of a (chain, draw, ...) DataArray, chain-major like ``stack(sample=("chain", "draw"))``."""
    arr = da.transpose("chain", "draw", ...).to_numpy()
    return arr.reshape((-1,) + arr.shape[2:])


#: Prior keys added after posteriors were already being saved, with the value that a file written
#: without them was fitted under (the noise scales were half-normal before 2026-12-06).
PRIORS_OF_OLDER_FILES = {"noise_prior": "halfnormal", "noise_alpha": 2.0}
#: Config keys added later, likewise (``time_coordinates``, ``strategy_slopes``: 2026-12-06; older fits sampled
#: time marginally and shared the slopes across strategies; ``cell_basis``: 2026-12-07, older fits sampled the
#: cells' coefficients directly).
CONFIG_OF_OLDER_FILES = {"time_coordinates": "marginal", "strategy_slopes": [], "cell_basis": "coef"}


def load_spec(idata: az.InferenceData, source: str = "posterior") -> ModelSpec:
    """Rebuild the :class:`ModelSpec` from a posterior's attrs, checking its config.

    Raises
    ------
    PosteriorFileError
        If the attrs are not a bayes_energy model's, or the config lacks keys
        this version of the package needs (the message names the version
        that wrote the file).
    """
    from . import MODELS

    attrs = idata.posterior.attrs if "posterior" in idata.groups() else {}
    if "bayes_energy_model" not in attrs or "bayes_energy_config" not in attrs:
        raise PosteriorFileError(f"{source}: the posterior lacks 'bayes_energy_model' in its attrs; not a bayes_energy fit")
    name, written_by = attrs["bayes_energy_model"], attrs.get("bayes_energy_version", "an unknown version")
    try:
        config = json.loads(attrs["bayes_energy_config"])
    except (TypeError, ValueError):
        raise PosteriorFileError(f"{source}: its model config is not valid JSON") from None
    if name not in MODELS or not isinstance(config, dict):
        raise PosteriorFileError(f"{source}: unknown model {name!r} (written by bayes_energy {written_by}); "
                                 f"this version knows {', '.join(MODELS)}")
    if isinstance(config.get("priors"), dict):
        for k, v in PRIORS_OF_OLDER_FILES.items():  # keys added later, whose absence means the earlier prior
            config["priors"].setdefault(k, v)
    for k, v in CONFIG_OF_OLDER_FILES.items():
        config.setdefault(k, v)
    need = set(MODELS[name]) | {"levels", "centre", "scale"}
    missing = sorted(need - set(config))
    missing += sorted(f"priors.{k}" for k in set(MODELS[name]["priors"]) - set(config.get("priors") or {}))
    if missing:
        raise PosteriorFileError(
            f"{source}: written by bayes_energy {written_by}, whose model config lacks {', '.join(missing)}; "
            f"this is bayes_energy {__version__}: refit the model with this version"
        )
    spec = ModelSpec(name=name, config=config)
    spec.coords = spec._coords()
    return spec


def load(path: str | os.PathLike, rebuild: bool = False):
    """Load a saved posterior, checking that it is whole and unchanged.

    Parameters
    ----------
    path : path
        A ``posterior.nc`` written by ``python -m bayes_energy.fit``.
    rebuild : bool, default False
        Also rebuild the PyMC model from the stored config and table.

    Returns
    -------
    arviz.InferenceData, or (InferenceData, ModelSpec, pymc.Model) with ``rebuild``.

    Raises
    ------
    PosteriorFileError
        If the file is missing, not a readable netCDF posterior (e.g.
        truncated), not a bayes_energy posterior, has a config this version
        cannot use, or its training table does not match the stored hash.

    Warns
    -----
    VersionWarning
        When another version of the package wrote the file.
    """
    path = Path(path)
    if not path.is_file():
        raise PosteriorFileError(f"{path}: no such file" if not path.exists() else f"{path}: is a folder, not a posterior file")
    try:
        idata = az.from_netcdf(path)
        for group in idata.groups():  # read now: a truncated file fails here, not later
            idata[group].load()
    except Exception as err:  # noqa: BLE001 - netCDF back ends raise many types
        raise PosteriorFileError(f"{path}: not a readable netCDF posterior ({type(err).__name__}: "
                                 f"{' '.join(str(err).split())[:200]})") from None
    spec = load_spec(idata, source=str(path))
    df = training_table(idata)
    if table_hash(df) != idata.posterior.attrs.get("training_table_sha256"):
        raise PosteriorFileError(f"{path}: the stored training table does not match its hash "
                                 "(edited after the fit?); refit instead of editing a posterior")
    written_by = idata.posterior.attrs.get("bayes_energy_version")
    if written_by != __version__:
        warnings.warn(f"{path}: written by bayes_energy {written_by}; this is {__version__}. Its config is "
                      "compatible, but results may differ from a refit", VersionWarning, stacklevel=2)
    _remember(idata, Posterior(idata, spec, df, str(path)))  # checked here: consumers reuse it (posterior_of)
    if not rebuild:
        return idata
    from .build import build_model

    return idata, spec, build_model(spec, df)


@dataclass(frozen=True, eq=False)
class Posterior:
    """A checked posterior with what every consumer derives from it, derived once.

    Attributes
    ----------
    idata : arviz.InferenceData
        The draws and provenance (give it to ArviZ as usual).
    spec : ModelSpec
        Rebuilt from the attrs, its config checked against this version.
    table : pandas.DataFrame or None
        The training table (None for an InferenceData without one, e.g. a
        prior-only object; consumers that need it say so).
    source : str
        The file it came from, or ``"posterior"``.
    """

    idata: az.InferenceData
    spec: ModelSpec
    table: pd.DataFrame | None
    source: str = "posterior"


#: id(InferenceData) -> (spec, table, source), dropped with the InferenceData (which is not hashable,
#: so no WeakKeyDictionary; the values hold no reference to it, so it can be collected).
_DERIVED: dict[int, tuple] = {}


def _remember(idata: az.InferenceData, post: Posterior) -> Posterior:
    key = id(idata)
    if key not in _DERIVED:
        weakref.finalize(idata, _DERIVED.pop, key, None)
    _DERIVED[key] = (post.spec, post.table, post.source)
    return post


def posterior_of(obj, source: str = "posterior") -> Posterior:
    """The :class:`Posterior` of a Posterior or an InferenceData (derived once per object, then reused).

    ``predict``, ``plan``, ``probe_update``, ``check_plausibility`` and the
    report accept either; they all start here, so a plan that predicts three
    times reads the spec and the training table once.
    """
    if isinstance(obj, Posterior):
        return obj
    if not isinstance(obj, az.InferenceData):
        raise TypeError(f"expected a posterior (arviz.InferenceData or bayes_energy Posterior), got {type(obj).__name__}")
    known = _DERIVED.get(id(obj))
    if known is not None:
        return Posterior(obj, *known)
    spec = load_spec(obj, source=source)
    try:
        table = training_table(obj)
    except PosteriorFileError:
        table = None
    return _remember(obj, Posterior(obj, spec, table, source))


def load_posterior(path: str | os.PathLike) -> Posterior:
    """:func:`load` a posterior file and return it as one checked :class:`Posterior`."""
    return posterior_of(load(path), source=str(path))
