"""The measured workload: a randomly initialised BERT classifier and its strategies.

* :func:`build_network` - ``BertForSequenceClassification(BertConfig(...))`` with
  random weights, no download (``HF_HUB_OFFLINE=1``).
* :func:`apply_strategy` - ``single``, ``ddp`` (DistributedDataParallel),
  ``fsdp`` (FSDP2 ``fully_shard`` per encoder block, then the model) and
  ``tp`` (DTensor ``parallelize_module``: attention q/k/v and the first MLP
  layer column-wise, the attention output and second MLP layer row-wise).
* :func:`make_batch` - a synthetic token batch; data-parallel ranks get
  different batches, tensor-parallel ranks the same one.
* :class:`Trainer` - one optimiser step (with gradient accumulation), timed.

Imports torch and transformers, which only the worker processes need.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from .plan import RunConfig  # noqa: E402

__all__ = ["build_network", "apply_strategy", "make_batch", "Trainer", "tokens_per_step", "TP_PLAN"]

#: Tensor-parallel plan of one HF BERT encoder block.
TP_PLAN: dict[str, str] = {
    "attention.self.query": "colwise",
    "attention.self.key": "colwise",
    "attention.self.value": "colwise",
    "attention.output.dense": "rowwise",
    "intermediate.dense": "colwise",
    "output.dense": "rowwise",
}


def build_network(cfg: RunConfig, device: torch.device | str = "cpu", seed: int = 0) -> torch.nn.Module:
    """A BERT classifier with random weights, built from ``cfg``.

    Every rank uses the same ``seed`` so replicated parameters start equal.
    """
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.heads,
        intermediate_size=cfg.ff,
        max_position_embeddings=max(512, cfg.seq_len),
        num_labels=2,
    )
    model = BertForSequenceClassification(config)
    return model.to(device).train()


def apply_strategy(model: torch.nn.Module, cfg: RunConfig, device: torch.device) -> torch.nn.Module:
    """Wrap or shard ``model`` for ``cfg.strategy`` over the default process group.

    Raises
    ------
    ValueError
        If the world size does not fit the strategy (``single`` needs 1 process).
    """
    world = dist.get_world_size() if dist.is_initialized() else 1
    if world != cfg.n_gpus:
        raise ValueError(f"config asks for n_gpus={cfg.n_gpus} but the process group has {world} processes")
    if cfg.strategy == "single":
        if world != 1:
            raise ValueError("strategy 'single' runs on exactly one process")
        return model
    if cfg.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (world,))
    if cfg.strategy == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in model.bert.encoder.layer:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model
    if cfg.strategy == "tp":
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
        for block in model.bert.encoder.layer:
            parallelize_module(block, mesh, {name: styles[kind]() for name, kind in TP_PLAN.items()})
        return model
    raise ValueError(f"unknown strategy {cfg.strategy!r}")


def make_batch(cfg: RunConfig, device: torch.device, rank: int = 0) -> dict[str, torch.Tensor]:
    """A synthetic batch of ``batch_size`` sequences of ``seq_len`` tokens.

    Data-parallel ranks draw different tokens; under ``tp`` all ranks draw
    the same batch, as tensor parallelism requires.
    """
    g = torch.Generator().manual_seed(1000 + (0 if cfg.strategy == "tp" else rank))
    ids = torch.randint(0, cfg.vocab_size, (cfg.batch_size, cfg.seq_len), generator=g)
    labels = torch.randint(0, 2, (cfg.batch_size,), generator=g)
    return {
        "input_ids": ids.to(device),
        "attention_mask": torch.ones_like(ids).to(device),
        "labels": labels.to(device),
    }


def tokens_per_step(cfg: RunConfig) -> int:
    """Tokens one optimiser step processes, summed over data-parallel ranks.

    Under ``tp`` every rank sees the same batch, so it is counted once.
    """
    ranks = 1 if cfg.strategy == "tp" else cfg.n_gpus
    return cfg.batch_size * cfg.seq_len * cfg.grad_accum * ranks


class Trainer:
    """Runs optimiser steps of a prepared model.

    Parameters
    ----------
    model : torch.nn.Module
        The model after :func:`apply_strategy`.
    batch : dict
        The synthetic batch, reused every micro-step.
    grad_accum : int
        Micro-batches per optimiser step.
    sync : callable
        Waits for the device (``torch.cuda.synchronize``; a no-op on CPU).
    """

    def __init__(self, model: torch.nn.Module, batch: dict[str, torch.Tensor], grad_accum: int = 1, sync=None) -> None:
        self.model = model
        self.batch = batch
        self.grad_accum = int(grad_accum)
        self.sync = sync or (lambda: None)
        # foreach=False: TP mixes DTensor and plain parameters, which the foreach kernels reject.
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)

    def _no_sync(self, last: bool) -> Any:
        # Reduce gradients on the last micro-batch only: DDP's no_sync, FSDP2's switch.
        if hasattr(self.model, "no_sync"):
            return self.model.no_sync() if not last else contextlib.nullcontext()
        if hasattr(self.model, "set_requires_gradient_sync") and self.grad_accum > 1:
            self.model.set_requires_gradient_sync(last)
        return contextlib.nullcontext()

    def step(self) -> float:
        """One optimiser step; returns its mean loss."""
        self.opt.zero_grad(set_to_none=True)
        total = 0.0
        for k in range(self.grad_accum):
            with self._no_sync(k == self.grad_accum - 1):
                loss = self.model(**self.batch).loss / self.grad_accum
                loss.backward()
            total += float(loss.detach())
        self.opt.step()
        return total

    def timed_steps(self, n: int) -> list[float]:
        """Run ``n`` steps; return each step's wall time, device synchronised."""
        times = []
        for _ in range(n):
            t = time.perf_counter()
            self.step()
            self.sync()
            times.append(time.perf_counter() - t)
        return times
