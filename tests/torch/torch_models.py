"""Tiny models for tests/torch: a GPT-2 from a config (tied embeddings) and small modules."""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def gpt2(seed: int = 0, n_embd: int = 32, dtype=torch.float32) -> GPT2LMHeadModel:
    """A 2-layer GPT-2 (about 27k parameters) in eval mode, weights drawn from ``seed``."""
    torch.manual_seed(seed)
    config = GPT2Config(n_layer=2, n_embd=n_embd, n_head=2, vocab_size=32, n_positions=16,
                        bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config).to(dtype).eval()


def tokens(seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(seed))


def logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits.clone()


class Small(torch.nn.Module):
    """Linear -> BatchNorm -> Linear: parameters, a frozen layer option, and buffers."""

    def __init__(self, seed: int = 0, freeze_first: bool = False):
        super().__init__()
        torch.manual_seed(seed)
        self.first = torch.nn.Linear(4, 6)
        self.norm = torch.nn.BatchNorm1d(6)
        self.second = torch.nn.Linear(6, 2)
        if freeze_first:
            self.first.requires_grad_(False)

    def forward(self, x):
        return self.second(torch.tanh(self.norm(self.first(x))))
