"""Save and load fitted posteriors (netCDF only, never pickle).

A saved file describes itself: :func:`load` reads the model name and config
from its attrs and the training table from its ``training_table`` group,
checks the table against the stored hash, and can rebuild the PyMC model.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import arviz as az
import numpy as np
import pandas as pd

from .spec import ModelSpec

__all__ = ["save", "load", "load_spec", "training_table", "sample_array", "PosteriorFileError"]


class PosteriorFileError(ValueError):
    """A file is not a bayes_energy posterior, or its contents do not match."""


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


def load_spec(idata: az.InferenceData) -> ModelSpec:
    """Rebuild the :class:`ModelSpec` from a posterior's attrs."""
    attrs = idata.posterior.attrs
    if "bayes_energy_model" not in attrs:
        raise PosteriorFileError("the posterior lacks 'bayes_energy_model' in its attrs; not a bayes_energy fit")
    spec = ModelSpec(name=attrs["bayes_energy_model"], config=json.loads(attrs["bayes_energy_config"]))
    spec.coords = spec._coords()
    return spec


def load(path: str | os.PathLike, rebuild: bool = False):
    """Load a saved posterior.

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
        If the file is not a bayes_energy posterior or its training table
        does not match the stored hash.
    """
    path = Path(path)
    if not path.is_file():
        raise PosteriorFileError(f"{path}: no such file")
    try:
        idata = az.from_netcdf(path)
    except Exception as err:  # noqa: BLE001 - netCDF back ends raise many types
        raise PosteriorFileError(f"{path}: not a readable netCDF posterior ({err})") from None
    spec = load_spec(idata)
    if not rebuild:
        return idata
    from .build import build_model
    from .sample import table_hash

    df = training_table(idata)
    if table_hash(df) != idata.posterior.attrs.get("training_table_sha256"):
        raise PosteriorFileError(f"{path}: the stored training table does not match its hash")
    return idata, spec, build_model(spec, df)
