"""A synthetic language of digit strings: three tasks in one format, seeded splits.

Every example is one line ``<task prompt>=<answer>.``, tokenised character by
character after a start mark ``^``:

* reverse  ``^r3841=1483.``    (``DIGITS`` digits, reversed)
* sort     ``^s3841=1348.``    (``DIGITS`` digits, sorted)
* shift    ``^i3841=4952.``    (``DIGITS`` digits, each plus one, 9 to 0)

Per task, distinct prompts are drawn with a seeded generator and split into
train / validation / test without overlap: the test split is never seen by
training, by the merge search or by the tuning of the baselines.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: token 0 pads; then the start mark, the end mark and the characters of the language
PAD = 0
ALPHABET = "^.0123456789=irs"
VOCAB = ("<pad>",) + tuple(ALPHABET)
TOKEN = {char: index + 1 for index, char in enumerate(ALPHABET)}
#: digits per prompt; a line is ``^``, the task letter, the digits, ``=``, the answer, ``.``
DIGITS = 4
SEQ_LEN = 2 * DIGITS + 4
TASKS = ("reverse", "sort", "shift")


def _digits(rng: np.random.Generator) -> str:
    return "".join(map(str, rng.integers(0, 10, DIGITS)))


PROMPTS = {"reverse": lambda rng: "r" + _digits(rng), "sort": lambda rng: "s" + _digits(rng),
           "shift": lambda rng: "i" + _digits(rng)}


def answer(task: str, prompt: str) -> str:
    """The answer to ``prompt`` (without the task letter)."""
    digits = prompt[1:]
    if task == "reverse":
        return digits[::-1]
    if task == "sort":
        return "".join(sorted(digits))
    return "".join(str((int(d) + 1) % 10) for d in digits)


@dataclass(frozen=True)
class Batch:
    """Token ids (n, SEQ_LEN) int64, padded with PAD, and a mask (n, SEQ_LEN) bool of the
    answer tokens (the characters after ``=`` and the end mark) -- the ones scored."""

    ids: np.ndarray
    answer_mask: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)


def encode(task: str, prompts) -> Batch:
    """The lines of ``prompts`` of ``task`` as a :class:`Batch`."""
    ids = np.full((len(prompts), SEQ_LEN), PAD, np.int64)
    mask = np.zeros((len(prompts), SEQ_LEN), bool)
    for row, prompt in enumerate(prompts):
        line = f"^{prompt}={answer(task, prompt)}."
        if len(line) > SEQ_LEN:
            raise ValueError(f"expected lines of at most {SEQ_LEN} characters, got {line!r}")
        ids[row, :len(line)] = [TOKEN[c] for c in line]
        mask[row, line.index("=") + 1:len(line)] = True
    return Batch(ids, mask)


def decode(ids) -> str:
    """The text of one row of token ids (padding dropped)."""
    return "".join(VOCAB[int(i)] for i in ids if int(i) != PAD)


@dataclass(frozen=True)
class TaskSplits:
    train: Batch
    validation: Batch
    test: Batch


def make_splits(seed: int = 0, train: int = 4000, validation: int = 256, test: int = 512) -> dict[str, TaskSplits]:
    """{task: TaskSplits}: distinct prompts per task, drawn with ``seed``, split without
    overlap into ``train``, ``validation`` and ``test`` lines."""
    splits = {}
    for index, task in enumerate(TASKS):
        rng = np.random.default_rng([seed, index])
        wanted, seen, prompts = train + validation + test, set(), []
        for _ in range(50 * wanted):
            prompt = PROMPTS[task](rng)
            if prompt not in seen:
                seen.add(prompt)
                prompts.append(prompt)
                if len(prompts) == wanted:
                    break
        if len(prompts) < wanted:
            raise ValueError(f"expected {wanted} distinct {task} prompts, got {len(prompts)}: ask for fewer")
        splits[task] = TaskSplits(encode(task, prompts[:train]), encode(task, prompts[train:train + validation]),
                                  encode(task, prompts[train + validation:]))
    return splits
