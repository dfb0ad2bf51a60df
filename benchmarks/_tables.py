"""Write a benchmark table as CSV and Markdown (no extra dependency)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

RESULTS = Path(__file__).resolve().parent / "results"


def markdown(df: pd.DataFrame, digits: int = 3) -> str:
    """A GitHub Markdown table of ``df`` (floats to ``digits`` significant digits)."""
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.{digits}g}"
        return str(v)

    head = "| " + " | ".join(map(str, df.columns)) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *body]) + "\n"


def write_table(df: pd.DataFrame, name: str, title: str) -> Path:
    """Write ``results/NAME.csv`` and ``results/NAME.md``; return the CSV path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    csv = RESULTS / f"{name}.csv"
    df.to_csv(csv, index=False)
    (RESULTS / f"{name}.md").write_text(f"# {title}\n\n{markdown(df)}")
    return csv
