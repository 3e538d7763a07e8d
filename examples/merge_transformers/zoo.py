"""The models to merge: a small GPT-2 built from a config (no download), pretrained
briefly on a mix of the synthetic tasks, then fine-tuned from that base into one
expert per task. All of it is cached as Hugging Face directories (``save_pretrained``)
under a cache folder, keyed by a hash of the spec, so later runs and every rank load them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from data import PAD, SEQ_LEN, TASKS, VOCAB, Batch, make_splits

#: part of the cache key: bump when training or the cached files change
TRAINING_VERSION = 1
#: the default cache folder (``--cache`` or ``$MERGE_TRANSFORMERS_CACHE`` override it)
DEFAULT_CACHE = Path.home() / ".cache" / "mpievo-example"


@dataclass(frozen=True)
class ModelSpec:
    """The model, its data and how base and experts train (AdamW, constant rate)."""

    n_embd: int = 64
    n_layer: int = 4
    n_head: int = 4
    pretrain_steps: int = 300
    finetune_steps: int = 150
    batch: int = 64
    lr: float = 3e-3          # pretraining
    finetune_lr: float = 5e-4  # small: experts stay near the base (in one basin), so they merge
    seed: int = 0
    train: int = 4000        # training lines per task
    validation: int = 256    # validation lines per task (merge fitness, baseline tuning)
    test: int = 512          # test lines per task (reports only)


#: the full version (a few minutes on a 2-core CPU) and the CI one
FULL = ModelSpec()
SMALL = ModelSpec(n_embd=32, n_layer=2, n_head=2, pretrain_steps=400, finetune_steps=150, lr=3e-3, train=2000,
                  validation=128, test=256)
SPECS = {"full": FULL, "small": SMALL}


def gpt2_config(spec: ModelSpec):
    from transformers import GPT2Config

    return GPT2Config(vocab_size=len(VOCAB), n_positions=SEQ_LEN, n_embd=spec.n_embd, n_layer=spec.n_layer,
                      n_head=spec.n_head, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                      bos_token_id=1, eos_token_id=2, pad_token_id=PAD)


def new_model(spec: ModelSpec):
    from transformers import GPT2LMHeadModel

    torch.manual_seed(spec.seed)
    return GPT2LMHeadModel(gpt2_config(spec)).eval()


def answer_loss(model, ids: torch.Tensor, answer_mask: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the answer tokens (the prompt digits are random:
    predicting them would only add noise to the gradient)."""
    logits = model(input_ids=ids).logits[:, :-1]
    targets = torch.where(answer_mask[:, 1:], ids[:, 1:], -100)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def train(model, batches: list[Batch], steps: int, lr: float, spec: ModelSpec, rng: np.random.Generator) -> None:
    """``steps`` AdamW steps on minibatches drawn evenly from ``batches`` (one per task)."""
    data = [(torch.from_numpy(b.ids), torch.from_numpy(b.answer_mask)) for b in batches]
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    for _ in range(steps):
        picks = [torch.from_numpy(rng.integers(0, len(ids), spec.batch // len(data) + (k < spec.batch % len(data))))
                 for k, (ids, _) in enumerate(data)]
        loss = answer_loss(model, torch.cat([ids[p] for (ids, _), p in zip(data, picks)]),
                           torch.cat([mask[p] for (_, mask), p in zip(data, picks)]))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    model.eval()


class Zoo:
    """The data, the base and the experts of one :class:`ModelSpec`, as Hugging Face
    directories ``<cache>/<key>/{base,expert-reverse,expert-sort,expert-shift}``."""

    def __init__(self, spec: ModelSpec = FULL, cache_dir: str | Path | None = None):
        self.spec = spec
        self.cache_dir = Path(cache_dir or os.environ.get("MERGE_TRANSFORMERS_CACHE") or DEFAULT_CACHE)
        self._splits = None

    @property
    def splits(self):
        if self._splits is None:
            s = self.spec
            self._splits = make_splits(s.seed, s.train, s.validation, s.test)
        return self._splits

    @property
    def folder(self) -> Path:
        key = hashlib.sha256(json.dumps([dataclasses.asdict(self.spec), TRAINING_VERSION]).encode()).hexdigest()
        return self.cache_dir / key[:16]

    @property
    def expert_names(self) -> list[str]:
        return [f"expert-{task}" for task in TASKS]

    def build(self) -> Path:
        """Train base and experts unless cached; returns the folder. Written to a private
        temporary folder then renamed, so ranks building at once never read half a model."""
        if (self.folder / "done").exists():
            return self.folder
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(dir=self.folder.parent, prefix=self.folder.name + ".tmp"))
        spec, splits = self.spec, self.splits
        rng = np.random.default_rng([spec.seed, 1])
        base = new_model(spec)
        train(base, [splits[t].train for t in TASKS], spec.pretrain_steps, spec.lr, spec, rng)
        base.save_pretrained(work / "base")
        for task in TASKS:
            expert = self.load("base", root=work)
            train(expert, [splits[task].train], spec.finetune_steps, spec.finetune_lr, spec, rng)
            expert.save_pretrained(work / f"expert-{task}")
        (work / "spec.json").write_text(json.dumps(dataclasses.asdict(spec), indent=1))
        (work / "done").write_text("")
        try:
            os.replace(work, self.folder)
        except OSError:       # another rank finished first: keep its copy
            shutil.rmtree(work, ignore_errors=True)
        return self.folder

    def load(self, name: str, root: Path | None = None):
        """The model of directory ``name`` (``"base"``, ``"expert-<task>"``), in eval mode."""
        from transformers import GPT2LMHeadModel

        return GPT2LMHeadModel.from_pretrained(root / name if root else self.build() / name).eval()
