"""Real torchrun launches of a tiny BERT on CPU (gloo), one per strategy.

Each launch takes a few seconds, mostly importing torch and transformers.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from bayes_energy.runner.plan import RunConfig  # noqa: E402
from bayes_energy.runner.sweep import Node, launch  # noqa: E402

TINY = dict(num_layers=2, hidden_size=32, heads=2, ff=64, seq_len=16, batch_size=2, steps=3, warmup=1, vocab_size=256)


@pytest.fixture(scope="module")
def node():
    return Node(device="cpu", meter="estimate", tdp_w=20.0)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("strategy", "n", "grad_accum"),
    [("single", 1, 1), ("ddp", 2, 2), ("fsdp", 2, 2), ("tp", 2, 1)],
)
def test_strategy_runs_two_gloo_processes(node, tmp_path, strategy, n, grad_accum):
    cfg = RunConfig(strategy=strategy, n_gpus=n, grad_accum=grad_accum, **TINY)
    res = launch(cfg, node, tmp_path, timeout_s=120)
    assert res["status"] == "ok", res.get("error")
    assert res["energy_source"] == "estimate" and res["measured_by"] == "node"
    assert res["energy_j"] > 0 and res["time_s"] > 0
    assert len(res["device_names"]) == n
    assert res["backend"] == "gloo"
    # tokens of the measured steps, summed over data-parallel ranks; tp ranks share one batch
    ranks = 1 if strategy == "tp" else n
    assert res["steps"] == 3
    assert res["tokens"] == 3 * grad_accum * TINY["batch_size"] * TINY["seq_len"] * ranks
    # the strategy really shards: fsdp and tp ranks hold part of the parameters
    if strategy in ("fsdp", "tp"):
        assert res["params_local"] < res["params_total"]
    else:
        assert res["params_local"] == res["params_total"]
    assert 0 <= res["overhead_share"] < 0.5
    assert res["warmup_s"] > 0 and len(res["windows"]) == 1
