"""What the ``mpievo bench models`` parts share: a GPT-2 from a config, the fastest of
interleaved repeats, and this process's resident memory (Linux ``/proc``)."""

from __future__ import annotations

import resource
import time

#: repetitions of each timed copy (the fastest counts)
REPEATS = 7


def build_model(layers: int, width: int, seed: int = 0, device: str = "cpu", *, vocab: int = 256,
                positions: int = 64):
    """A GPT-2 of ``layers`` blocks of ``width`` (``vocab`` tokens, ``positions`` positions;
    12 x 768 with 50,257 tokens and 1,024 positions is GPT-2 small), eval mode."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(n_layer=layers, n_embd=width, n_head=max(1, width // 64), vocab_size=vocab,
                        n_positions=positions, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config).eval().to(device)


def fastest(*actions, repeats: int = REPEATS, clock=time.perf_counter) -> list[float]:
    """The fastest of ``repeats`` timed calls of each action (seconds of ``clock``: wall time,
    or ``time.process_time`` for CPU time), the actions taking turns so that a busy moment
    of a shared machine hits them alike."""
    best = [float("inf")] * len(actions)
    for _ in range(repeats):
        for index, action in enumerate(actions):
            start = clock()
            action()
            best[index] = min(best[index], clock() - start)
    return best


def _status_bytes(key: str) -> int | None:
    """``VmRSS`` / ``VmHWM`` of this process from /proc (Linux), else None."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _peak_bytes() -> int:
    """Peak resident set since the last :func:`_reset_peak` (Linux VmHWM; else the
    process's peak so far, ru_maxrss)."""
    peak = _status_bytes("VmHWM")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reset_peak() -> bool:
    """Start a new peak at the current resident set (Linux: ``5 > /proc/self/clear_refs``)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
        return _status_bytes("VmHWM") is not None
    except OSError:
        return False
