"""The sweep-table schema: validate() rejects bad input with row, column and expectation."""

import numpy as np
import pandas as pd
import pytest

from bayes_energy.schema import REQUIRED, SchemaError, add_efficiency, validate


def good_table() -> pd.DataFrame:
    rows = []
    for strategy, n in (("single", 1), ("ddp", 2), ("fsdp", 2), ("tp", 2)):
        rows.append(dict(hardware="cpu-x", family="bert", num_layers=2, hidden_size=64, heads=2, ff=256,
                         seq_len=32, batch_size=4, grad_accum=1, tokens=1280, strategy=strategy, n_gpus=n,
                         time_s=2.0 if n == 1 else 1.25, energy_j=50.0, energy_source="estimate", repeats=1))
    return pd.DataFrame(rows)


def test_good_table_passes_and_is_typed():
    out = validate(good_table())
    assert out["n_gpus"].dtype == np.int64 and out["energy_j"].dtype == float
    assert list(out["strategy"]) == ["single", "ddp", "fsdp", "tp"]


def _break(col, value, row=1):
    df = good_table()
    df[col] = df[col].astype(object)
    df.loc[row, col] = value
    return df


# (kind of bad input, broken table, words the message must contain)
CASES = [
    ("missing column", good_table().drop(columns=["energy_j"]), ["missing", "energy_j"]),
    ("non-numeric", _break("time_s", "fast"), ["row 3", "time_s", "number", "'fast'"]),
    ("NaN", _break("energy_j", np.nan), ["row 3", "energy_j", "NaN"]),
    ("zero energy", _break("energy_j", 0.0), ["row 3", "energy_j", "positive"]),
    ("negative time", _break("time_s", -1.0), ["row 3", "time_s", "positive"]),
    ("unknown strategy", _break("strategy", "zero3"), ["row 3", "strategy", "single, ddp, fsdp, tp", "zero3"]),
    ("n_gpus < 1", _break("n_gpus", 0), ["row 3", "n_gpus", "at least 1"]),
    ("single on 2 devices", _break("n_gpus", 2, row=0), ["row 2", "n_gpus", "single", "exactly 1"]),
    ("duplicated run key", pd.concat([good_table(), good_table().iloc[[1]]], ignore_index=True), ["rows 3, 6", "duplicates"]),
    ("fractional layers", _break("num_layers", 2.5), ["row 3", "num_layers", "whole number"]),
    ("empty hardware", _break("hardware", ""), ["row 3", "hardware", "non-empty"]),
    ("infinite energy", _break("energy_j", np.inf), ["row 3", "energy_j", "finite"]),
    ("bad status", good_table().assign(status=["ok", "maybe", "ok", "ok"]), ["row 3", "status", "'ok' or 'failed'"]),
    ("non-positive efficiency", good_table().assign(efficiency=[1.0, -0.5, 0.8, 0.7]), ["row 3", "efficiency", "positive"]),
    ("no rows", good_table().iloc[:0], ["no rows"]),
]


@pytest.mark.parametrize("kind,table,words", CASES, ids=[c[0] for c in CASES])
def test_validate_rejects_with_row_and_column(kind, table, words):
    with pytest.raises(SchemaError) as err:
        validate(table, source="sweep.csv")
    msg = str(err.value)
    assert msg.startswith("sweep.csv:")
    for w in words:
        assert w in msg, f"{kind}: {w!r} not in {msg!r}"


def test_failed_rows_may_lack_outcomes_but_ok_rows_may_not():
    df = good_table().assign(status="ok", error="")
    df["energy_j"] = df["energy_j"].astype(object)
    df.loc[2, ["energy_j", "status", "error"]] = [np.nan, "failed", "out of memory"]
    out = validate(df)
    assert out.loc[2, "status"] == "failed"
    df.loc[2, "status"] = "ok"
    with pytest.raises(SchemaError, match="row 4, column 'energy_j'"):
        validate(df)


def test_efficiency_is_throughput_ratio_against_single():
    out = add_efficiency(validate(good_table()))
    assert out.loc[0, "speedup"] == 1.0 and out.loc[0, "efficiency"] == 1.0
    # same tokens, 2.0 s -> 1.25 s on 2 devices: speedup 1.6, efficiency 0.8
    np.testing.assert_allclose(out.loc[1:, "speedup"], 1.6)
    np.testing.assert_allclose(out.loc[1:, "efficiency"], 0.8)


def test_efficiency_nan_without_single_partner():
    df = good_table().iloc[1:]
    out = add_efficiency(validate(df))
    assert out["efficiency"].isna().all()


def test_required_columns_documented_in_module_docstring():
    import bayes_energy.schema as s

    for col in REQUIRED:
        assert col in s.__doc__
