"""``mpievo bench``: benchmarks, run under mpiexec.

    mpievo bench collectives [--sizes 4K,1M,256M] [--cases float32:max] [--json PATH]
                                                                   mpievo vs native MPI
    mpievo bench calibrate [--update mpievo/comm/tuning.json]      selection thresholds
    mpievo bench engine [--json PATH]                              engine vs pygmo, weak scaling
    mpievo bench gpu [--check] [--json PATH]                       device kernels, all-reduce, islands
    mpievo bench schemes [--p 1,2,4] [--costs 0,5ms] [--out DIR]   the schemes side by side (no mpiexec)
    mpievo bench bbob [JOB.toml ...] [--functions 1,3] [--peers] [--out DIR]   COCO's BBOB suite
    mpievo bench genomes [--dims 1e3,1e5,1e7,1e8] [--device cpu|cuda] [--out DIR]
                                                                   dense, delta, seeded genomes
    mpievo bench models copy|memory|scale [--layers N --width W]   PyTorch models as genomes
    mpievo bench moo [--problems zdt1,dtlz2:3] [--seeds 0,1,2] [--budget N] [--json PATH]
                                                                   hypervolume vs pygmo nsga2, moead
    mpievo bench checkpoint [--params 124e6] [--rows 16] [--changed 4]   incremental, background checkpoints
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import sys

HELP = ("benchmarks: collectives (vs native MPI), calibrate (selection table), engine, gpu, schemes, bbob, "
        "genomes, models, moo, checkpoint")

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """'4096', '4K', '1M', '2G' -> bytes.

    Raises:
        argparse.ArgumentTypeError: not a size.
    """
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", text, flags=re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"expected a size such as 4096, 4K, 1M or 256M, got {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def parse_sizes(text: str) -> list[int]:
    return [parse_size(part) for part in text.split(",") if part.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", metavar="WHAT")
    sub.required = True
    coll = sub.add_parser("collectives", help="mpievo's collectives vs the MPI library's")
    coll.add_argument("--sizes", type=parse_sizes, default=None,
                      help="comma-separated sizes (default 4K..256M doubling)")
    coll.add_argument("--collectives", default="allreduce,reduce_scatter,allgather,broadcast",
                      help="comma-separated subset")
    coll.add_argument("--malloc", default="default,tuned",
                      help="'default', 'tuned' (glibc keeps freed memory) or both (default)")
    coll.add_argument("--algorithm", default=None, help="force one mpievo algorithm")
    coll.add_argument("--cases", type=_parse_cases, default=None,
                      help="dtype:op pairs for all-reduce and reduce-scatter, e.g. float32:sum,int32:sum "
                           "(ops sum, max, min); all-gather and broadcast run once per dtype. Default: "
                           "float32:sum,float32:max,float32:min,int32:sum for all-reduce, float32:sum "
                           "for reduce-scatter, float32 for all-gather and broadcast")
    coll.add_argument("--target-seconds", type=float, default=0.3, help="time per measurement")
    coll.add_argument("--shared", action="store_true",
                      help="all-reduce and reduce-scatter inputs in the node's shared memory "
                           "(Communicator.shared_empty), which the shm algorithm reads in place; the "
                           "native call reads the same arrays")
    coll.add_argument("--json", dest="json_path", default=None, help="write rows as JSON here")
    cal = sub.add_parser("calibrate", help="time every algorithm, print/merge selection thresholds")
    cal.add_argument("--update", default=None, help="merge the result into this tuning JSON")
    cal.add_argument("--sizes", type=parse_sizes, default=None,
                     help="comma-separated sizes (default 256..64M doubling)")
    cal.add_argument("--repeats", type=int, default=3,
                     help="sweeps over every size (candidates interleaved in each); the median wins")
    cal.add_argument("--target-seconds", type=float, default=0.05, help="time per candidate and size")
    cal.add_argument("--json", dest="json_path", default=None, help="write the result here")
    eng = sub.add_parser("engine", help="one island vs pygmo (like for like: GA vs sade, jDE vs its jDE), "
                                        "weak scaling, migration cost")
    eng.add_argument("--json", dest="json_path", default=None, help="write results as JSON here")
    _add_gpu_arguments(sub)
    _add_schemes_arguments(sub)
    _add_bbob_arguments(sub)
    _add_moo_arguments(sub)
    _add_genomes_arguments(sub)
    models = sub.add_parser("models", add_help=False,
                            help="PyTorch models as genomes (the torch extra): a child into the model's flat "
                                 "buffer vs memcpy, peak memory vs its estimate, 2-rank scaling; "
                                 "`mpievo bench models --help` lists its options")
    models.add_argument("models_args", nargs=argparse.REMAINDER)
    ckpt = sub.add_parser("checkpoint", help="incremental checkpoints of a model-sized archive written in the "
                                             "background: bytes, blocked time, the SIGTERM checkpoint's time")
    ckpt.add_argument("--params", type=float, default=124e6, help="genes per genome (default 124e6)")
    ckpt.add_argument("--rows", type=int, default=16, help="archive members (default 16)")
    ckpt.add_argument("--dtype", default="bfloat16", help="genome dtype (default bfloat16)")
    ckpt.add_argument("--changed", type=int, default=4, help="rows changed between checkpoints (default 4)")
    ckpt.add_argument("--dir", default=None, help="where to write (default: a temporary directory, removed)")
    es = sub.add_parser("es", add_help=False,
                        help="ES against EvoX's OpenES (quality per evaluation, evaluations/s) and the bytes "
                             "ES sends between ranks; `mpievo bench es --help` lists its options")
    es.add_argument("es_args", nargs=argparse.REMAINDER)


def _add_schemes_arguments(sub) -> None:
    # defaults None: SchemesOptions holds them (importing it here would load numpy)
    sch = sub.add_parser("schemes", help="island, hybrid, centralized, replicated side by side at P = 1, "
                                         "2, 4 (start it without mpiexec: it launches each P itself)")
    sch.add_argument("--p", dest="ps", type=_numbers(int), help="rank counts, 1 included (default 1,2,4)")
    sch.add_argument("--costs", dest="costs_ms", type=_costs,
                     help="fitness costs per child, e.g. 0,5ms,50ms (default; a bare number is ms)")
    sch.add_argument("--modes", type=lambda text: tuple(_split(text)),
                     help="how a cost is spent: sleep, burn (CPU), vary (sleep x1..x4 per child, mean "
                          "the cost); default sleep,burn,vary")
    sch.add_argument("--dims", type=_numbers(int),
                     help="genome sizes; costs and modes run at the first, the others at the first cost "
                          "(default 1e2,1e5,1e7)")
    sch.add_argument("--budget", type=_numbers(int, one=True),
                     help="evaluations per run below 1e6 genes, the same for every scheme (default "
                          "192; 32 times that at cost 0 below 1e4 genes, where a child costs microseconds; "
                          "from 1e6 genes 32, with archives and batches of 2 instead of 8)")
    sch.add_argument("--sweeps", type=int,
                     help="whole sweeps one after another, each after its own calibration; each row is "
                          "the run of median wall time over them (default 3, about 12 minutes a sweep here)")
    sch.add_argument("--out", default=None, help="write schemes.csv, schemes.json, table.md, schemes.png here")


def _costs(text: str) -> tuple:
    """'0,5ms,0.05s' -> milliseconds."""
    values = []
    for part in (p.strip().lower() for p in text.split(",")):
        scale, number = (1e3, part[:-1]) if part.endswith("s") and not part.endswith("ms") else (1.0, part)
        try:
            value = float(number.removesuffix("ms")) * scale
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a cost such as 0, 5ms or 0.05s, got {part!r}")
        values.append(value)
    return tuple(values)


def _add_gpu_arguments(sub) -> None:
    # defaults None: GpuBenchOptions holds them (importing it here would load the engine)
    gpu = sub.add_parser("gpu", help="device reduction kernel vs copy, device all-reduce, device "
                                     "island vs host island, device breeding (run on a GPU node)")
    gpu.add_argument("--kernel-mib", type=_numbers(float),
                     help="comma-separated operand sizes of the kernel section, MiB (default 64,256,1024)")
    gpu.add_argument("--allreduce-mib", type=_numbers(float),
                     help="comma-separated all-reduce and compression sizes, MiB (default 1,64)")
    gpu.add_argument("--dims", type=_numbers(int),
                     help="comma-separated genome sizes of the island section (default 1e3,1e5,1e7)")
    gpu.add_argument("--breed-dim", type=_numbers(int, one=True),
                     help="genes per child of the breeding section (default 1e7)")
    gpu.add_argument("--repeats", type=_numbers(int, one=True),
                     help="timed repetitions of kernels, collectives and breeding (median; default 10)")
    gpu.add_argument("--island-seconds", type=_numbers(float, one=True),
                     help="seconds each island steps per dim, at least 3 generations (default 1)")
    gpu.add_argument("--host-threads", type=_numbers(int, one=True),
                     help="Numba/BLAS threads of the host island (default 1, as mpievo run)")
    gpu.add_argument("--topk-ratio", type=_numbers(float, one=True),
                     help="fraction of entries top-k compression sends (default 0.01)")
    gpu.add_argument("--force-direct", action="store_true",
                     help="time the direct device path even when MPI does not report CUDA awareness")
    gpu.add_argument("--check", action="store_true",
                     help="tiny sizes, every section run and verified, nothing timed (also in the "
                          "CUDA simulator)")
    gpu.add_argument("--json", dest="json_path", default=None, help="write results as JSON here")


def _numbers(kind, *, one: bool = False):
    """argparse type: comma-separated numbers ('1e7' allowed for ints); their ranges are
    checked by the benchmark's options (one schema, :mod:`mpievo.schema`)."""
    name = "an integer" if kind is int else "a number"

    def parse(text: str):
        values = []
        for part in (p.strip() for p in text.split(",")):
            try:
                value = float(part)
            except ValueError:
                value = math.nan
            if not math.isfinite(value) or (kind is int and value != int(value)):
                raise argparse.ArgumentTypeError(f"expected {name}, got {part!r}")
            values.append(kind(value))
        if one and len(values) != 1:
            raise argparse.ArgumentTypeError(f"expected one value, got {text!r}")
        return values[0] if one else tuple(values)

    return parse


def main(args: argparse.Namespace) -> int:
    if args.bench == "models":
        from mpievo.bench.models import main as bench_models

        return bench_models(args.models_args)
    if args.bench == "checkpoint":
        from mpievo.bench.checkpoint import main as bench_checkpoint

        return bench_checkpoint(args)
    if args.bench == "es":
        from mpievo.bench.es import main as bench_es

        return bench_es(args.es_args)
    if args.bench == "genomes":
        return _bench_genomes(args)
    if args.bench == "bbob":
        return _bench_bbob(args)
    if args.bench == "moo":
        return _bench_moo(args)
    if args.bench == "schemes":
        return _bench_schemes(args)
    if args.bench == "gpu":
        from mpievo.bench.gpu import EXIT_REFUSED, GpuBenchOptions, refusal

        gpu_options = _options("gpu", GpuBenchOptions, _GPU_OPTIONS, args, force_direct=args.force_direct)
        if gpu_options is None:         # bad options are refused first, wherever the bench would run
            return 2
        reason = refusal(args.check)
        if reason:
            print(f"mpievo bench gpu: {reason}", file=sys.stderr)
            return EXIT_REFUSED
    from mpi4py import MPI

    from mpievo.comm import abort_on_error

    rank = MPI.COMM_WORLD.Get_rank()
    with abort_on_error():
        if args.bench == "collectives":
            from mpievo.bench.collectives import run_collectives

            result = run_collectives(sizes=args.sizes, collectives=_split(args.collectives),
                                     malloc_modes=_split(args.malloc), algorithm=args.algorithm,
                                     target_s=args.target_seconds, cases=args.cases, shared=args.shared)
        elif args.bench == "calibrate":
            result = _calibrate(args, rank)
        elif args.bench == "gpu":
            result = _bench_gpu(gpu_options.checking() if args.check else gpu_options)
        else:
            from mpievo.bench.engine import bench_engine
            from mpievo.comm import Communicator

            result = bench_engine(Communicator(), json_path=None)
        if rank == 0 and args.json_path:
            with open(args.json_path, "w") as f:
                json.dump(result, f, indent=1)
            print(f"wrote {args.json_path}")
    return 0


_GPU_OPTIONS = ("kernel_mib", "allreduce_mib", "dims", "breed_dim", "repeats", "island_seconds",
                "host_threads", "topk_ratio")


def _options(what: str, options_class, names: tuple[str, ...], args, **fixed):
    """The benchmark's options (a table of :mod:`mpievo.schema`, which checks every value)
    from the flags given; None after printing what is wrong."""
    given = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    try:
        return options_class(**given, **fixed)
    except ValueError as err:
        print(f"mpievo bench {what}: {err}", file=sys.stderr)
        return None


def _bench_gpu(options) -> dict:
    from mpievo.comm import Communicator
    from mpievo.bench.gpu import bench_gpu

    comm = Communicator()
    try:
        return bench_gpu(comm, options)
    finally:
        comm.free()


_SCHEMES_OPTIONS = ("ps", "costs_ms", "modes", "dims", "budget", "sweeps")
_LAUNCHED = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")


def _bench_schemes(args) -> int:
    import os

    from mpievo.bench.schemes import SchemesCheckError, SchemesOptions, bench_schemes

    launched = [name for name in _LAUNCHED if name in os.environ]
    if launched:
        print(f"mpievo bench schemes: expected to start without mpiexec (it launches every P itself), "
              f"got {launched[0]} set", file=sys.stderr)
        return 2
    options = _options("schemes", SchemesOptions, _SCHEMES_OPTIONS, args)
    if options is None:
        return 2
    try:
        bench_schemes(options, args.out)
    except SchemesCheckError as err:
        print(err, file=sys.stderr)
        return 1
    return 0


def _parse_cases(text: str) -> list:
    """--cases value -> [(dtype, op)]; argparse reports a bad entry as a usage error."""
    from mpievo.bench.collectives_verify import parse_cases  # lazy, like every mpievo import here

    try:
        return parse_cases(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _calibrate(args, rank) -> dict:
    from mpievo.bench.calibrate_collectives import calibrate, merge_tuning

    update_path = args.update
    result = calibrate(sizes=args.sizes, target_s=args.target_seconds, repeats=args.repeats)
    if rank == 0:
        print(json.dumps(result))
        if update_path:
            try:
                with open(update_path) as f:
                    table = json.load(f)
            except FileNotFoundError:
                table = {}
            with open(update_path, "w") as f:
                json.dump(merge_tuning(table, result), f, indent=1)
                f.write("\n")
            print(f"merged into {update_path}")
    return result


# ---------------------------------------------------------------- bench bbob
_BBOB_OPTIONS = ("functions", "dims", "instances", "seeds", "budget_per_dim", "islands")


def _add_bbob_arguments(sub) -> None:
    # defaults None: BbobOptions holds them (the grid)
    bbob = sub.add_parser("bbob", help="mpievo jobs (and pygmo) on COCO's BBOB suite: CSV, table of median "
                                       "log10(f - f_opt) and targets hit, ECDF (needs coco-experiment)")
    bbob.add_argument("jobs", nargs="*", metavar="JOB.toml",
                      help="mpievo jobs, one solver each; 'default' (also without any): the library's defaults "
                           "with float64 genomes")
    bbob.add_argument("--functions", type=_numbers(int), help="BBOB functions (default 1,2,3,8,10,12,15,16,21)")
    bbob.add_argument("--dims", type=_numbers(int), help="dimensions (default 10,40)")
    bbob.add_argument("--instances", type=_numbers(int), help="instances (default 1,2,3)")
    bbob.add_argument("--seeds", type=_numbers(int), help="seeds of every (function, dim, instance) (default 0,1,2)")
    bbob.add_argument("--budget-per-dim", type=_numbers(int, one=True),
                      help="evaluations per dimension of every run (default 1e4)")
    bbob.add_argument("--islands", type=_numbers(int, one=True), help="islands of every job (default 4)")
    bbob.add_argument("--set", dest="assignments", action="append", default=[], metavar="TABLE.KEY=VALUE",
                      help="set a key of every job (TOML value), repeatable")
    bbob.add_argument("--peers", action="store_true",
                      help="also run pygmo's sade archipelago and cmaes (IPOP) when pygmo is installed, and "
                           "pycma's BIPOP-CMA-ES when cma is")
    bbob.add_argument("--peer-names", type=lambda text: tuple(t for t in text.split(",") if t), default=(),
                      help="with --peers: only these peers, e.g. pygmo:sade,pygmo:cmaes,cma:bipop (default all)")
    bbob.add_argument("--out", default=None, help="write runs.csv (after every run), table.md, bbob.json, "
                                                  "ecdf.png here")
    bbob.add_argument("--resume", action="store_true",
                      help="reuse the runs in --out's runs.csv made with the same job (by its digest), problem, "
                           "seed and budget; run only the rest")


# ---------------------------------------------------------------- bench moo
_MOO_OPTIONS = ("problems", "seeds", "algorithms", "budget", "islands", "population", "interval", "emigrants")


def _add_moo_arguments(sub) -> None:
    # defaults None: MooBenchOptions holds them
    moo = sub.add_parser("moo", help="mpievo's nsga2 islands vs pygmo's nsga2 and moead archipelagos: "
                                     "hypervolume at equal budget (needs moocore; pygmo for the peers)")
    moo.add_argument("--problems", type=lambda text: tuple(p.strip() for p in text.split(",") if p.strip()),
                     help="comma-separated, e.g. zdt1,dtlz2:3 (default: ZDT1-4, ZDT6, DTLZ 2 and 3 objectives)")
    moo.add_argument("--seeds", type=_numbers(int), help="seeds of every problem (default 0,1,2)")
    moo.add_argument("--algorithms", type=lambda text: tuple(a.strip() for a in text.split(",") if a.strip()),
                     help="mpievo's island algorithms, e.g. nsga2,smsemoa,moead (default nsga2)")
    moo.add_argument("--budget", type=_numbers(int, one=True), help="evaluations per run (default 40000)")
    moo.add_argument("--islands", type=_numbers(int, one=True), help="islands of every solver (default 4)")
    moo.add_argument("--population", type=_numbers(int, one=True), help="members per island (default 100)")
    moo.add_argument("--interval", type=_numbers(int, one=True), help="generations between migrations (default 10)")
    moo.add_argument("--emigrants", type=_numbers(int, one=True), help="migrants per edge (default 4)")
    moo.add_argument("--no-peers", dest="peers", action="store_false", help="mpievo only (no pygmo)")
    moo.add_argument("--defaults", action="store_true",
                     help="both sides at their defaults (mpievo: algorithm, islands, budget only; pygmo: nsga2() "
                          "on unconnected islands of --population); medians compared")
    moo.add_argument("--json", dest="json_path", default=None, help="write the rows as JSON here")


def _bench_moo(args) -> int:
    from mpievo.bench.moo import (MooBenchOptions, MooCheckError, bench_moo, defaults_table, summary_table,
                                  write_json)
    from mpievo.parallel.world import world_comm

    options = _options("moo", MooBenchOptions, _MOO_OPTIONS, args, peers=args.peers, defaults=args.defaults)
    if options is None:
        return 2
    try:
        import moocore  # noqa: F401
    except ImportError:
        print("mpievo bench moo: expected moocore (pip install 'mpievo[moo]'), got an ImportError", file=sys.stderr)
        return 2
    pygmo = None
    if options.peers:
        try:
            import pygmo
        except ImportError:
            print("mpievo bench moo: pygmo is not installed (the bench extra): mpievo only", file=sys.stderr)
    comm = world_comm()
    with _abort_guard(comm):
        try:
            rows = bench_moo(comm, options, pygmo)
        except MooCheckError as err:
            print(err, file=sys.stderr)
            return 1
    if comm.rank == 0:
        print((defaults_table if options.defaults else summary_table)(rows, options))
        if args.json_path:
            write_json(args.json_path, rows, options)
            print(f"wrote {args.json_path}")
    return 0


def _bench_bbob(args) -> int:
    from mpievo.config import ConfigError
    from mpievo.bench.bbob import BbobCheckError, BbobOptions, bench_bbob
    from mpievo.parallel.world import world_comm

    try:
        import cocoex  # noqa: F401
    except ImportError:
        print("mpievo bench bbob: expected cocoex (pip install coco-experiment, the bench extra), "
              "got an ImportError", file=sys.stderr)
        return 2
    if args.resume and args.out is None:
        print("mpievo bench bbob: --resume: expected --out DIR (the runs.csv to resume), got none", file=sys.stderr)
        return 2
    options = _options("bbob", BbobOptions, _BBOB_OPTIONS, args, jobs=tuple(args.jobs),
                       assignments=tuple(args.assignments), peers=args.peers, peer_names=args.peer_names)
    if options is None:
        return 2
    comm = world_comm()
    with _abort_guard(comm):
        try:
            bench_bbob(comm, options, args.out, resume=args.resume)
        except (ConfigError, FileExistsError) as err:
            if comm.rank == 0:
                print(err, file=sys.stderr)
            return 2
        except BbobCheckError as err:
            print(err, file=sys.stderr)
            return 1
    return 0


def _abort_guard(comm):
    """On several ranks, abort the job when one rank fails (no hang); else nothing."""
    if comm.size == 1:
        return contextlib.nullcontext()
    from mpievo.comm import abort_on_error

    return abort_on_error()


# ---------------------------------------------------------------- bench genomes
_GENOMES_OPTIONS = ("dims", "capacity", "batch", "generations", "repeats", "device")


def _genomes_device(text: str) -> str:
    """argparse type of ``--device``: one of the benchmark's devices."""
    from mpievo.bench.genomes import DEVICES

    if text not in DEVICES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(DEVICES)}, got {text!r}")
    return text


def _add_genomes_arguments(sub) -> None:
    # defaults None: GenomesOptions holds them
    gen = sub.add_parser("genomes", help="dense, delta and seeded genomes: bytes per migrant, migration time, "
                                         "breeding GB/s, peak memory, checkpoint size and time (run under "
                                         "mpievo launch -n 2)")
    gen.add_argument("--dims", type=_numbers(int), help="genome sizes (default 1e3,1e5,1e7); a cell that needs "
                                                        "over 80%% of the free memory is skipped (1e8 dense on "
                                                        "2 ranks: ~12 GB)")
    gen.add_argument("--capacity", type=_numbers(int, one=True), help="archive of every island (default 4)")
    gen.add_argument("--batch", type=_numbers(int, one=True), help="children per generation (default 4)")
    gen.add_argument("--generations", type=_numbers(int, one=True),
                     help="timed generations per island (default 3)")
    gen.add_argument("--repeats", type=_numbers(int, one=True), help="timed migrations (median; default 5)")
    gen.add_argument("--device", type=_genomes_device,
                     help="cpu (default) or cuda: islands with engine.device = 'cuda' (dense and delta rows on "
                          "the GPU, seeded recipes materialised there) and the fitness on the GPU; a cell "
                          "that needs over 80%% of a GPU's free memory is skipped")
    gen.add_argument("--out", default=None, help="write genomes.csv, genomes.json, table.md here")


def _bench_genomes(args) -> int:
    from mpievo.bench.genomes import GenomesCheckError, GenomesOptions, bench_genomes
    from mpievo.parallel.world import world_comm

    options = _options("genomes", GenomesOptions, _GENOMES_OPTIONS, args)
    if options is None:
        return 2
    if options.on_device:
        from mpievo.evo.device import cuda_usable

        if not cuda_usable():
            print("mpievo bench genomes --device cuda: expected a CUDA GPU (or NUMBA_ENABLE_CUDASIM=1), got none",
                  file=sys.stderr)
            return 2
    comm = world_comm()
    with _abort_guard(comm):
        try:
            bench_genomes(comm, options, args.out)
        except GenomesCheckError as err:
            if comm.rank == 0:
                print(err, file=sys.stderr)
            return 1
    return 0
