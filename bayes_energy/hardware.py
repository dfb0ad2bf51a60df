"""Device specifications of common data-centre and workstation GPUs.

``bayes_energy/data/gpu_specs.csv`` holds, per GPU: board power (TDP, W),
peak dense 16-bit Tensor throughput (TFLOP/s; BF16 where the device has it,
else FP16 with FP32 accumulation, never the with-sparsity figure), memory
bandwidth (GB/s) and memory size (GB), with the vendor document each number
comes from. They are the roofline quantities a model can use as
hardware-level predictors for GPU types never measured.

Caveat: the values were transcribed from the cited documents without
checking them against the PDFs in this environment (it has no network);
verify a row before relying on it. The models do not use the table yet.

Examples
--------
>>> specs = load_gpu_specs()
>>> float(specs.loc["A100-SXM4-40GB", "tdp_w"])
400.0
>>> match_gpu("NVIDIA GeForce RTX 2080 Ti")
'RTX-2080-Ti'
"""

from __future__ import annotations

import re
from importlib import resources

import pandas as pd

__all__ = ["load_gpu_specs", "match_gpu", "SPEC_COLUMNS"]

#: Numeric columns of the table, with units in the names.
SPEC_COLUMNS = ("tdp_w", "peak_bf16_dense_tflops", "mem_bandwidth_gbs", "mem_gb")


def load_gpu_specs() -> pd.DataFrame:
    """The GPU specification table, indexed by ``gpu``.

    Returns
    -------
    pandas.DataFrame
        Columns ``vendor``, ``architecture``, ``form_factor``,
        :data:`SPEC_COLUMNS`, ``aliases`` (``;``-separated names as devices
        report them), ``source`` and ``notes``.
    """
    with resources.files("bayes_energy").joinpath("data/gpu_specs.csv").open("r", encoding="utf-8") as fh:
        df = pd.read_csv(fh)
    for col in SPEC_COLUMNS:
        df[col] = df[col].astype(float)
    return df.set_index("gpu")


def _norm(name: str) -> str:
    s = name.lower()
    for word in ("nvidia", "geforce", "tesla", "amd", "instinct"):
        s = s.replace(word, "")
    return re.sub(r"[^a-z0-9]", "", s)


def match_gpu(name: str, specs: pd.DataFrame | None = None) -> str | None:
    """The table key for a device name (as NVML or a dataset reports it), or None.

    Matching ignores case, punctuation and the words NVIDIA, GeForce, Tesla,
    AMD and Instinct, and tries the key and every alias.
    """
    specs = load_gpu_specs() if specs is None else specs
    want = _norm(name)
    for key, row in specs.iterrows():
        names = [key] + str(row["aliases"]).split(";")
        if any(_norm(n) == want for n in names):
            return key
    return None
