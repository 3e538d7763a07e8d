"""``mpievo bench es finetune``: mpievo's ES against EvoX's OpenES fine-tuning a GPT-2.

Like for like, one process each, torch on one thread: every weight of the base GPT-2 of
``examples/merge_transformers`` (built and cached by its ``build.py``; loaded from the
cache, no download) as one flat vector, the fitness the negated mean log-probability of
the right answers on the first ``--lines`` training lines of ``--task`` (the example's
``scoring.answer_hits``, the same code on both sides), the same population, sigma,
learning rate, Adam and number of evaluations, antithetic pairs on both sides.

mpievo: :class:`~mpievo.parallel.es_group.SeededES` with ``shaping="none"`` (the raw
fitness) and ``bias_correction=False``, as EvoX's ``OpenES`` does. EvoX:
``OpenES(optimizer="adam", mirrored_sampling=True)`` in a ``StdWorkflow``, run by
``--evox-python`` (its own environment, which needs torch, transformers and evox; it
imports the example's modules from their folder). Printed per solver: the training fitness
of the mean at ``--checkpoints`` points of the budget (median over the seeds), the
held-out test split's exact match and answer log-probability of the final mean (and of
the base), the wall and CPU seconds of the generations (the mean's fitness measured with
the clocks stopped).

Example: ``mpievo bench es finetune --evox-python /tmp/evox-venv/bin/python --generations 30``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

#: the example whose models and data are used
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "merge_transformers"

#: the EvoX side, run by another interpreter; JSON in on stdin, JSON out on stdout, the mean in spec["out"]
EVOX_FINETUNE_SCRIPT = r"""
import json, sys, time
import numpy as np
import torch
spec = json.load(sys.stdin)
sys.path.insert(0, spec["example"])
from data import Batch, make_splits
from scoring import answer_hits
from transformers import GPT2LMHeadModel
from evox.algorithms import OpenES
from evox.core import Problem
from evox.workflows import StdWorkflow
torch.manual_seed(spec["seed"])
torch.set_num_threads(1)
train = make_splits(*spec["splits"])[spec["task"]].train
train = Batch(train.ids[:spec["lines"]], train.answer_mask[:spec["lines"]])
model = GPT2LMHeadModel.from_pretrained(spec["model"]).eval()
params = list(model.parameters())
def loss(row):
    torch.nn.utils.vector_to_parameters(row, params)
    return -float(answer_hits(model, train)[1].mean())
class Tune(Problem):
    def evaluate(self, pop):
        return torch.tensor([loss(row) for row in pop], dtype=torch.float32)
x0 = torch.nn.utils.parameters_to_vector(params).detach().clone()
algo = OpenES(spec["popsize"], x0, spec["lr"], spec["sigma"], optimizer="adam", mirrored_sampling=True)
workflow = StdWorkflow(algo, Tune())
curve, elapsed, cpu = [], 0.0, 0.0
for g in range(1, spec["generations"] + 1):
    start, start_cpu = time.perf_counter(), time.process_time()
    workflow.init_step() if g == 1 else workflow.step()
    elapsed += time.perf_counter() - start
    cpu += time.process_time() - start_cpu
    if g in spec["checkpoints"]:
        curve.append(loss(algo.center.detach()))
np.save(spec["out"], algo.center.detach().numpy().astype(np.float32))
print(json.dumps({"curve": curve, "seconds": elapsed, "cpu_seconds": cpu, "dim": int(x0.numel())}))
"""


def example_modules(folder: Path | str = EXAMPLE):
    """The example's ``(data, scoring, zoo)`` modules, imported from ``folder``.

    Example::

        data, scoring, zoo = example_modules()
    """
    folder = str(folder)
    if not (Path(folder) / "scoring.py").exists():
        raise ValueError(f"example folder: expected examples/merge_transformers with scoring.py, got {folder}")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import data
    import scoring
    import zoo
    return data, scoring, zoo


def flat_weights(model) -> np.ndarray:
    """Every parameter of ``model`` as one float32 vector, in ``model.parameters()`` order
    (torch's ``parameters_to_vector``: the layout of EvoX's side).

    Example::

        x0 = flat_weights(model)               # (201920,) for the example's base GPT-2
    """
    import torch

    return torch.nn.utils.parameters_to_vector(list(model.parameters())).detach().numpy().astype(np.float32)


def set_flat_weights(model, vector) -> None:
    """Write :func:`flat_weights`'s layout back into ``model``.

    Example::

        set_flat_weights(model, result["mean"])
    """
    import torch

    params = list(model.parameters())
    vector = np.asarray(vector, np.float32)
    dim = sum(p.numel() for p in params)
    if vector.shape != (dim,):
        raise ValueError(f"expected a weight vector of shape ({dim},), got {vector.shape}")
    torch.nn.utils.vector_to_parameters(torch.from_numpy(vector.copy()), params)


def answer_fitness(model, batch, answer_hits) -> float:
    """Minimised fitness: minus the mean over ``batch``'s lines of the right answer's
    log-probability (``answer_hits`` of the example's scoring).

    Example::

        answer_fitness(model, train, scoring.answer_hits)      # e.g. 3.2
    """
    return -float(answer_hits(model, batch)[1].mean())


def run_mpievo_finetune(model, batch, answer_hits, *, seed, popsize, sigma, lr, generations, checkpoints) -> dict:
    """SeededES (one process, raw fitness, Adam without bias correction: as EvoX's OpenES)
    fine-tuning every weight of ``model`` on ``batch``; the mean's fitness at
    ``checkpoints`` (generations), the generations' wall and CPU seconds and the final mean
    (written into ``model`` too).

    Example::

        result = run_mpievo_finetune(model, train, scoring.answer_hits, seed=0, popsize=30, sigma=1e-3,
                                     lr=2e-3, generations=30, checkpoints={10, 20, 30})
    """
    from mpievo.comm.protocol import SelfComm
    from mpievo.evo.algorithms.es import ES
    from mpievo.parallel.es_group import SeededES

    def fitness(row: np.ndarray) -> float:
        set_flat_weights(model, row)
        return answer_fitness(model, batch, answer_hits)

    es = ES(popsize=popsize, sigma=sigma, learning_rate=lr, optimizer="adam", shaping="none", bias_correction=False)
    run = SeededES(SelfComm(), fitness, flat_weights(model), es, seed=seed)
    curve, elapsed, cpu = [], 0.0, 0.0
    for g in range(1, generations + 1):
        start, start_cpu = time.perf_counter(), time.process_time()
        run.step()
        elapsed += time.perf_counter() - start
        cpu += time.process_time() - start_cpu
        if g in checkpoints:
            curve.append(fitness(run.es.mean))
    set_flat_weights(model, run.es.mean)
    return {"curve": curve, "seconds": elapsed, "cpu_seconds": cpu, "mean": run.es.mean.copy()}


def run_evox_finetune(python: str, model_dir, splits: tuple, task: str, lines: int, *, seed, popsize, sigma, lr,
                      generations, checkpoints, example: Path | str = EXAMPLE) -> dict:
    """EvoX's OpenES on the same fine-tuning, in ``python`` (a subprocess): the model
    loaded from ``model_dir`` (a ``save_pretrained`` folder), the training lines from
    ``make_splits(*splits)[task]``; returns what :func:`run_mpievo_finetune` returns.

    Example::

        result = run_evox_finetune("/tmp/evox-venv/bin/python", zoo.folder / "base", (0, 4000, 256, 512),
                                   "sort", 256, seed=0, popsize=30, sigma=1e-3, lr=2e-3, generations=30,
                                   checkpoints={10, 20, 30})
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "mean.npy")
        spec = {"example": str(example), "model": str(model_dir), "splits": list(splits), "task": task,
                "lines": lines, "seed": seed, "popsize": popsize, "sigma": sigma, "lr": lr,
                "generations": generations, "checkpoints": sorted(checkpoints), "out": out}
        done = subprocess.run([python, "-c", EVOX_FINETUNE_SCRIPT], input=json.dumps(spec), capture_output=True,
                              text=True, timeout=7200)
        if done.returncode:
            raise RuntimeError(f"EvoX side: expected exit 0, got {done.returncode}: {done.stderr[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])       # the script's last line
        result["mean"] = np.load(out)
    return result


def finetune(options) -> list[dict]:
    """Both solvers on every seed, taking turns; prints the table (see the module docstring)."""
    import torch

    torch.set_num_threads(1)
    data, scoring, zoo_module = example_modules(options.example or EXAMPLE)
    spec = zoo_module.SPECS[options.size]
    zoo = zoo_module.Zoo(spec, options.cache)
    folder = zoo.build()
    split = zoo.splits[options.task]
    train = data.Batch(split.train.ids[:options.lines], split.train.answer_mask[:options.lines])
    splits = (spec.seed, spec.train, spec.validation, spec.test)
    generations, popsize = options.generations, options.popsize
    checkpoints = sorted({max(1, generations * k // options.checkpoints) for k in range(1, options.checkpoints + 1)})
    settings = dict(popsize=popsize, sigma=options.sigma, lr=options.lr, generations=generations,
                    checkpoints=set(checkpoints))

    def scores(model) -> tuple[float, float]:
        hits, logp = scoring.answer_hits(model, split.test)
        return float(hits.mean()), float(logp.mean())

    from mpievo.comm.protocol import SelfComm
    from mpievo.evo.algorithms.es import ES
    from mpievo.parallel.es_group import SeededES

    SeededES(SelfComm(), lambda row: float(row[0]), np.zeros(8, np.float32),      # compiles the kernels first
             ES(popsize=2, shaping="none", bias_correction=False)).step()
    base = zoo.load("base")
    base_fitness, (base_acc, base_logp) = answer_fitness(base, train, scoring.answer_hits), scores(base)
    rows = []
    for seed in options.seeds:
        solvers = [("mpievo es (as EvoX)", lambda m: run_mpievo_finetune(m, train, scoring.answer_hits, seed=seed,
                                                                        **settings))]
        if options.evox_python:
            solvers.append(("evox OpenES", lambda m: run_evox_finetune(
                options.evox_python, folder / "base", splits, options.task, options.lines, seed=seed,
                example=options.example or EXAMPLE, **settings)))
        for name, solve in solvers:
            model = zoo.load("base")
            result = solve(model)
            set_flat_weights(model, result.pop("mean"))
            accuracy, logp = scores(model)
            rows.append({"solver": name, "seed": seed, **result, "test_accuracy": accuracy, "test_logp": logp})
            print(f"  seed {seed} {name}: training fitness {result['curve'][-1]:.4f}, test accuracy {accuracy:.3f}, "
                  f"answer log-probability {logp:.4f}, {result['seconds']:.0f} s wall, "
                  f"{result['cpu_seconds']:.0f} CPU s", flush=True)
    dim = len(flat_weights(base))
    print(f"GPT-2 base of examples/merge_transformers ({options.size}, {dim:,d} weights), task {options.task}, "
          f"fitness -mean answer log-probability on {options.lines} training lines; popsize {popsize}, sigma "
          f"{options.sigma}, Adam lr {options.lr} (no bias correction, raw fitness), {generations} generations "
          f"= {generations * popsize} evaluations, seeds {list(options.seeds)}, one process each, 1 torch thread")
    print(f"base: training fitness {base_fitness:.4f}; test accuracy {base_acc:.3f}, answer log-probability "
          f"{base_logp:.4f} ({len(split.test)} test lines)")
    print(f"{'solver':22s} " + " ".join(f"{c * popsize:>8d}" for c in checkpoints)
          + "  test acc  test logp   wall s    CPU s   (medians; seeds' range of the final training fitness)")
    for name in dict.fromkeys(r["solver"] for r in rows):
        mine = [r for r in rows if r["solver"] == name]
        curve = [statistics.median(r["curve"][i] for r in mine) for i in range(len(checkpoints))]
        finals = [r["curve"][-1] for r in mine]
        med = {k: statistics.median(r[k] for r in mine) for k in ("test_accuracy", "test_logp", "seconds",
                                                                  "cpu_seconds")}
        print(f"{name:22s} " + " ".join(f"{v:8.4f}" for v in curve)
              + f"  {med['test_accuracy']:8.3f} {med['test_logp']:9.4f} {med['seconds']:8.0f} "
              f"{med['cpu_seconds']:8.0f}   ({min(finals):.4f}-{max(finals):.4f})")
    for row in rows:
        row["checkpoints"] = [c * popsize for c in checkpoints]
        row["base"] = {"fitness": base_fitness, "test_accuracy": base_acc, "test_logp": base_logp}
    return rows
