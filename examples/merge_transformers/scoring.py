"""Task scores: teacher-forced exact match of the answer tokens, one batched forward
pass per task on a fixed split, deterministic.

A line counts as solved when, fed the true line, the model's most likely next token
is right at every answer position (the digits after ``=`` and the end mark).
"""

from __future__ import annotations

import numpy as np
import torch

from data import TASKS, Batch


@torch.no_grad()
def answer_hits(model, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """(exact match per line (n,) bool, log-probability of the true answer per line (n,))."""
    ids = torch.from_numpy(batch.ids)
    logits = model(input_ids=ids).logits[:, :-1].float()
    targets, mask = ids[:, 1:], torch.from_numpy(batch.answer_mask[:, 1:])
    right = (logits.argmax(dim=-1) == targets) | ~mask
    logp = torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None])[..., 0]
    return right.all(dim=1).numpy(), (logp * mask).sum(dim=1).numpy()


def task_scores(model, splits: dict, split: str = "validation") -> dict[str, float]:
    """{task: exact-match accuracy on ``split``} and their ``"mean"``."""
    scores = {task: float(answer_hits(model, getattr(splits[task], split))[0].mean()) for task in TASKS}
    scores["mean"] = float(np.mean([scores[t] for t in TASKS]))
    return scores


#: weight of the mean answer log-probability in the fitness: a tie-break between merges
#: of equal accuracy (accuracy moves in steps of one line)
LOGP_WEIGHT = 1e-3


def fitness(model, splits: dict, split: str = "validation") -> float:
    """Merge fitness (to maximise): mean over tasks of exact-match accuracy, plus
    ``LOGP_WEIGHT`` times the mean answer log-probability."""
    values = [answer_hits(model, getattr(splits[task], split)) for task in TASKS]
    return float(np.mean([hits.mean() + LOGP_WEIGHT * logp.mean() for hits, logp in values]))


def fitness_rows(model, splits: dict, rows, split: str = "validation") -> float:
    """:func:`fitness` on the lines ``rows`` (indices) of each task's ``split`` only: the
    cheap score of ``problem.fidelity_sample`` (the full fitness where ``rows`` is all)."""
    values = []
    for task in TASKS:
        batch = getattr(splits[task], split)
        hits, logp = answer_hits(model, Batch(batch.ids[rows], batch.answer_mask[rows]))
        values.append(hits.mean() + LOGP_WEIGHT * logp.mean())
    return float(np.mean(values))
