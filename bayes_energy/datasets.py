"""Loaders that return validated sweep tables.

* :func:`load_sweep` reads the runner's CSV files.
* :func:`load_mayaki2026` maps the paper authors' published table onto the
  sweep-table schema. The file is never shipped with this package: it is
  found from an explicit path, the ``BAYES_ENERGY_DATA`` environment
  variable, the user cache directory, or ``../shared/datasets/mayaki2026``
  seen from the working directory; :func:`download_mayaki2026` fetches it at
  a pinned commit into the cache.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from .schema import KWH_TO_J, SchemaError, add_efficiency, validate

__all__ = [
    "DEFAULT_DATA",
    "read_csv",
    "load_sweep",
    "load_mayaki2026",
    "find_mayaki2026",
    "download_mayaki2026",
    "MAYAKI_REPO",
    "MAYAKI_COMMIT",
]

#: Sweep files that ``python -m bayes_energy.fit`` fits when given no data.
DEFAULT_DATA: tuple[str, ...] = ("data/cpu_sweep.csv",)

MAYAKI_REPO = "MansMayaki/system-aware-energy-prediction"
MAYAKI_COMMIT = "d5797f2a2e377a6413dca36da8bc052d952b02ed"
MAYAKI_FILE = "data/configurations.csv"
MAYAKI_URL = f"https://raw.githubusercontent.com/{MAYAKI_REPO}/{MAYAKI_COMMIT}/{MAYAKI_FILE}"
#: File names accepted for the authors' table (public subset first).
MAYAKI_NAMES = ("configurations_public.csv", "configurations.csv")
#: Columns the authors' table must have for the mapping.
MAYAKI_COLUMNS = (
    "GPU model", "arch", "model", "framework", "gpus", "max_length", "batch_size",
    "seq_len_batch", "grad_accum", "num_layers", "hidden_size", "heads", "ff", "task",
    "fp16", "bf16", "power_correction", "energy_consumed_kWh", "duration_s",
    "tokens_seen", "params_calc", "M_proxy", "flops_per_token_proxy", "n_runs", "T1",
    "speed_up", "parallel_efficiency", "strategy", "compute",
)
#: The authors' configuration-family key (strategy and GPU count excluded).
MAYAKI_GROUP_KEY = (
    "GPU model", "arch", "model", "max_length", "batch_size", "seq_len_batch", "grad_accum",
    "num_layers", "hidden_size", "heads", "ff", "task", "fp16", "bf16", "power_correction",
)
_MAYAKI_SIZE_RANGE = (100_000, 5_000_000)  # bytes; the 629-row public file is ~330 kB
_STRATEGY_MAP = {"Baseline": "single", "FSDP": "fsdp", "TP": "tp", "DDP": "ddp"}


def read_csv(path: str | os.PathLike, what: str = "table") -> pd.DataFrame:
    """Read a comma-separated file, or say in one line why it cannot be read.

    Accepted: UTF-8 with or without a byte-order mark, LF or CRLF line ends,
    gzip-compressed (by content, whatever the name). Refused with a
    :class:`~bayes_energy.schema.SchemaError` that names the file: a missing
    path, a folder, an empty file, a binary file, and a file whose header
    looks separated by ``;`` or tabs (read as one column it would only fail
    later with "16 columns missing").
    """
    path = Path(path)
    if not path.exists():
        raise SchemaError(f"{path}: no such file")
    if path.is_dir():
        raise SchemaError(f"{path}: is a folder; expected a CSV file ({what})")
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError as err:
        raise SchemaError(f"{path}: cannot be read ({err.strerror})") from None
    if not head.strip():
        raise SchemaError(f"{path}: the file is empty; expected a CSV {what} with a header line")
    compression = "gzip" if head[:2] == b"\x1f\x8b" else None
    if compression is None:
        if b"\x00" in head:
            raise SchemaError(f"{path}: a binary file, not a CSV {what}")
        first = head.decode("utf-8-sig", errors="replace").splitlines()[0]
        for sep, name in ((";", "semicolons"), ("\t", "tabs")):
            if first.count(sep) >= 2 and first.count(",") == 0:
                raise SchemaError(f"{path}: line 1: the columns look separated by {name}, not commas; "
                                  "save the file as comma-separated CSV")
    try:
        df = pd.read_csv(path, encoding="utf-8-sig", compression=compression)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, EOFError, OSError) as err:
        raise SchemaError(f"{path}: not a readable CSV file ({' '.join(str(err).split())[:200]})") from None
    df.columns = [str(c).strip() for c in df.columns]
    return df


def load_sweep(paths: str | os.PathLike | Sequence[str | os.PathLike], include_failed: bool = False) -> pd.DataFrame:
    """Read, validate and concatenate sweep CSV files.

    Parameters
    ----------
    paths : path or sequence of paths
        Sweep CSV files as written by ``python -m bayes_energy.runner.sweep``.
    include_failed : bool, default False
        Keep rows whose ``status`` is ``failed`` (their outcomes are empty).

    Returns
    -------
    pandas.DataFrame
        The validated table with ``speedup`` and ``efficiency`` added and a
        ``source_file`` column.

    Raises
    ------
    SchemaError
        If any file is missing or breaks the schema; the message names the
        file, the CSV line(s) and the column. Nothing is returned on error.

    Examples
    --------
    >>> df = load_sweep("data/cpu_sweep.csv")  # doctest: +SKIP
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    frames = []
    for p in paths:
        p = Path(p)
        df = validate(read_csv(p), source=str(p))
        df["source_file"] = p.name
        frames.append(df)
    if not frames:
        raise SchemaError("no sweep files given")
    table = pd.concat(frames, ignore_index=True)
    if len(frames) > 1:
        table = validate(table, source=" + ".join(str(p) for p in paths), row_offset=0)
    if not include_failed and "status" in table.columns:
        table = table[table["status"] == "ok"].reset_index(drop=True)
        for col in table.columns:
            if str(table[col].dtype) == "Int64":
                table[col] = table[col].astype("int64")
    return add_efficiency(table)


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "bayes_energy" / "mayaki2026"


def find_mayaki2026(path: str | os.PathLike | None = None) -> Path:
    """Locate the authors' table.

    Looks, in order, at ``path`` (a file or a folder), ``$BAYES_ENERGY_DATA``
    (a file or a folder), the user cache folder
    (``~/.cache/bayes_energy/mayaki2026``) and ``../shared/datasets/mayaki2026``
    from the working directory.

    Raises
    ------
    FileNotFoundError
        With instructions to obtain the file at the pinned commit.
    """
    candidates: list[Path] = []
    for given in (path, os.environ.get("BAYES_ENERGY_DATA")):
        if given:
            g = Path(given)
            candidates += [g] if g.suffix == ".csv" else [g / n for n in MAYAKI_NAMES] + [g / "mayaki2026" / n for n in MAYAKI_NAMES]
            if path is not None:
                break
    if path is None:
        for folder in (_cache_dir(), Path("..") / "shared" / "datasets" / "mayaki2026"):
            candidates += [folder / n for n in MAYAKI_NAMES]
    for c in candidates:
        if c.is_file():
            return c
    looked = ", ".join(str(c) for c in candidates) or "(nowhere)"
    raise FileNotFoundError(
        "The Mayaki (2026) measurements are not on this machine (looked at: "
        f"{looked}). They are published in the GitHub repository {MAYAKI_REPO}, file "
        f"{MAYAKI_FILE}, commit {MAYAKI_COMMIT}. Run "
        "`python -c \"import bayes_energy.datasets as d; d.download_mayaki2026()\"` to fetch it "
        "into the cache, or pass its path (or set BAYES_ENERGY_DATA)."
    )


def download_mayaki2026(dest: str | os.PathLike | None = None, url: str = MAYAKI_URL, sha256: str | None = None) -> Path:
    """Download the authors' table at the pinned commit and check it.

    The file is written to a temporary name and moved into place only after
    its size, header and (optionally) SHA-256 are checked, so a broken
    download never leaves a file behind.

    Parameters
    ----------
    dest : path, optional
        Target folder; default the user cache folder.
    url : str
        Source URL; defaults to the pinned commit of the authors' repository.
    sha256 : str, optional
        Expected digest of the file.

    Returns
    -------
    pathlib.Path
        The path of the checked file.
    """
    folder = Path(dest) if dest is not None else _cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "configurations.csv"
    with urllib.request.urlopen(url, timeout=60) as resp:  # noqa: S310 - pinned https URL
        payload = resp.read(_MAYAKI_SIZE_RANGE[1] + 1)
    lo, hi = _MAYAKI_SIZE_RANGE
    if not lo <= len(payload) <= hi:
        raise SchemaError(f"{url}: downloaded {len(payload)} bytes, expected between {lo} and {hi}")
    if sha256 is not None and hashlib.sha256(payload).hexdigest() != sha256:
        raise SchemaError(f"{url}: SHA-256 does not match the expected {sha256}")
    header = payload.split(b"\n", 1)[0].decode("utf-8", "replace").split(",")
    missing = [c for c in MAYAKI_COLUMNS if c not in header]
    if missing:
        raise SchemaError(f"{url}: the header lacks column(s) {', '.join(missing)}")
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    with os.fdopen(fd, "wb") as fh:
        fh.write(payload)
    os.replace(tmp, target)
    return target


def load_mayaki2026(path: str | os.PathLike | None = None) -> pd.DataFrame:
    """Load the Mayaki (2026) measurements as a sweep table.

    Mapping: ``energy_consumed_kWh`` × 3.6e6 → ``energy_j``; ``duration_s`` →
    ``time_s``; ``Baseline``/``FSDP``/``TP`` → ``single``/``fsdp``/``tp``;
    ``arch`` → ``family`` (lower case); ``GPU model`` → ``hardware``;
    ``gpus`` → ``n_gpus``; ``tokens_seen`` → ``tokens``; ``n_runs`` →
    ``repeats``; ``energy_source`` = ``codecarbon``. The authors' own
    ``speed_up`` (:math:`T_1/T_N`) and ``parallel_efficiency`` become
    ``speedup`` and ``efficiency``. ``group`` holds the authors'
    configuration-family key and ``workload`` the task.

    ``seq_len`` is the sequence length the authors' proxies use, recovered as
    ``M_proxy / (B d L)``: ``max_length`` for GPT rows and the measured padded
    length (66, 97 or 128) for BERT rows. ``max_length`` and
    ``seq_len_batch`` are kept as they are.

    Parameters
    ----------
    path : path, optional
        The CSV file or its folder. See :func:`find_mayaki2026`.

    Returns
    -------
    pandas.DataFrame
        A validated sweep table.
    """
    file = find_mayaki2026(path)
    raw = read_csv(file)
    missing = [c for c in MAYAKI_COLUMNS if c not in raw.columns]
    if missing:
        raise SchemaError(f"{file}: not the authors' table; missing column(s) {', '.join(missing)}")
    unknown = ~raw["strategy"].isin(_STRATEGY_MAP)
    if unknown.any():
        raise SchemaError(
            f"{file}: row {int(np.flatnonzero(unknown)[0]) + 2}, column 'strategy': expected one of "
            f"{', '.join(_STRATEGY_MAP)}, got {raw['strategy'][unknown].iloc[0]!r}"
        )
    seq_len = raw["M_proxy"] / (raw["batch_size"] * raw["hidden_size"] * raw["num_layers"])
    group = raw[list(MAYAKI_GROUP_KEY)].astype(str).agg("|".join, axis=1)
    df = pd.DataFrame(
        {
            "hardware": raw["GPU model"].astype(str),
            "family": raw["arch"].astype(str).str.lower(),
            "num_layers": raw["num_layers"],
            "hidden_size": raw["hidden_size"],
            "heads": raw["heads"],
            "ff": raw["ff"],
            "seq_len": np.round(seq_len),
            "batch_size": raw["batch_size"],
            "grad_accum": raw["grad_accum"],
            "tokens": raw["tokens_seen"],
            "strategy": raw["strategy"].map(_STRATEGY_MAP),
            "n_gpus": raw["gpus"],
            "time_s": raw["duration_s"],
            "energy_j": raw["energy_consumed_kWh"] * KWH_TO_J,
            "energy_source": "codecarbon",
            "repeats": raw["n_runs"],
            "speedup": raw["speed_up"],
            "efficiency": raw["parallel_efficiency"],
            "workload": raw["task"].astype(str),
            "group": pd.factorize(group)[0].astype(int),
            "model_name": raw["model"].astype(str),
            "max_length": raw["max_length"],
            "seq_len_batch": raw["seq_len_batch"],
        }
    )
    df["group"] = "cf" + df["group"].astype(str).str.zfill(3)
    out = validate(df, source=str(file))
    out["source_file"] = file.name
    return out
