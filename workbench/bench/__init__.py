"""Benchmarks behind every measured table; each is ``workbench bench NAME``, registered once in ``BENCHMARKS``.

A benchmark is a module here with ``command(args) -> int`` (what ``workbench bench NAME`` runs: the measurement,
then a table or, with ``--json``, the result the README's renderer reads) and its entry below: name, help and
options. The options are data, so that building the command line imports no benchmark (several start
TensorFlow or plotly); every benchmark also takes ``--json``.
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from typing import Any

Option = tuple[tuple[str, ...], dict[str, Any]]


def option(*flags: str, **settings: Any) -> Option:
    """One command-line option, as ``argparse.add_argument`` takes it."""
    return flags, settings


@dataclass(frozen=True)
class Benchmark:
    """One ``workbench bench NAME``: what it measures and where its ``command`` is."""

    name: str
    help: str
    module: str
    options: tuple[Option, ...] = ()

    def add_to(self, commands: Any) -> argparse.ArgumentParser:
        """Its subcommand in ``commands`` (an argparse subparsers object)."""
        parser = commands.add_parser(self.name, help=self.help)
        for flags, settings in self.options:
            parser.add_argument(*flags, **settings)
        parser.add_argument("--json", action="store_true", help="print the result as JSON")
        parser.set_defaults(handler=self.command)
        return parser

    def command(self, args: argparse.Namespace) -> int:
        return int(importlib.import_module(self.module).command(args))


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark(
        "allreduce",
        "allreduce bus bandwidth: MPI beside Horovod",
        "workbench.bench.allreduce",
        (
            option("--ranks", type=int, default=2),
            option("--mpi", choices=("openmpi", "mpich"), default="openmpi"),
            option("--cycle-time-ms", type=float, default=None, help="HOROVOD_CYCLE_TIME"),
            option("--bind-to", default=None, help="mpiexec binding (core, none, ...)"),
            option("--min-seconds", type=float, default=0.25, help="time measured per size and library"),
        ),
    ),
    Benchmark(
        "overhead",
        "training throughput with and without recording",
        "workbench.bench.overhead",
        (
            option(
                "--repetitions", type=int, default=480, help="paired blocks (1600 of 25 steps resolve ±0.5 %% here)"
            ),
            option("--steps", type=int, default=25, help="steps per block (short blocks pair best)"),
            option(
                "--tf-threads",
                type=int,
                default=None,
                help="TensorFlow's intra/inter-op threads (1: no spin-wait noise)",
            ),
        ),
    ),
    Benchmark(
        "analysis",
        "load + breakdown + POP + findings of a stored run (1 M events), one core, peak RSS",
        "workbench.bench.analysis",
        (
            option("--events", type=int, default=1_000_000),
            option("--ranks", type=int, default=8),
            option("--repeats", type=int, default=3, help="fresh processes; the fastest is reported"),
            option(
                "--strings", choices=("categorical", "object"), default="categorical", help="Run.load's string columns"
            ),
            option(
                "--split",
                action="store_true",
                help="a large job (8 ranks a node, slow nodes, late ranks) analysed at once and in rank groups"
                " (workbench.rank_groups), side by side",
            ),
            option("--workers", default="0,2", help="--split: local worker counts to time (0: in-process)"),
            option("--group-ranks", type=int, default=32, help="--split: ranks per group"),
            option("--no-whole", action="store_true", help="--split: skip the run analysed at once"),
        ),
    ),
    Benchmark(
        "timeline",
        "Horovod timeline import: MB/s and peak memory",
        "workbench.bench.timeline",
        (
            option("--mb", type=float, default=300.0, help="size of the synthetic timeline written first"),
            option("--path", default=None, help="import this timeline instead of a synthetic one"),
        ),
    ),
    Benchmark(
        "horovod-step",
        "Horovod's cost per step on 2 ranks: grouped, fused, in-graph, cycle times",
        "workbench.bench.horovod_step",
        (
            option("--steps", type=int, default=300, help="steps per timed block"),
            option("--rounds", type=int, default=5, help="interleaved rounds; the median is reported"),
        ),
    ),
    Benchmark(
        "redraw",
        "timeline build and widget update with 8 x 10 000 spans",
        "workbench.bench.redraw",
        (option("--ranks", type=int, default=8), option("--spans-per-rank", type=int, default=10_000)),
    ),
    Benchmark(
        "live",
        "the live dashboard following a synthetic job (64 ranks; 1 024 with --ranks): refresh, latency",
        "workbench.bench.live",
        (
            option("--ranks", type=int, default=64),
            option("--seconds", type=float, default=30.0, help="how long the dashboard follows the job"),
            option("--step-s", type=float, default=0.1, help="each rank's step length (3 spans per step)"),
            option("--refresh-s", type=float, default=0.5, help="the dashboard's refresh period"),
            option("--flush-s", type=float, default=0.5, help="each rank's flush period (one part file per flush)"),
            option("--feed-processes", type=int, default=1, help="processes writing the ranks' files"),
            option("--ranks-per-host", type=int, default=None, help="ranks on each host (default: one host)"),
            option("--slow-host", type=int, default=None, help="this host's ranks compute 25 %% slower"),
        ),
    ),
    Benchmark(
        "projection",
        "scaling projection checked against saved sweeps (artifacts/), the seeds and published results",
        "workbench.bench.projection",
        (
            option("--allreduce", default=None, metavar="FILE", help="bench allreduce --json to fit"),
            option(
                "--seeds",
                action="store_true",
                help="only the seeds' clusters (004, 001) described without a run, beside their published tables",
            ),
            option(
                "--published",
                action="store_true",
                help="only published large-scale results (Horovod at 128-512 GPUs, TensorFlow's EC2 64-GPU table)"
                " beside the projection from their systems described",
            ),
            option(
                "--nodes",
                action="store_true",
                help="only the sweeps on a miniature cluster's nodes (artifacts/nodes-*), each count from its 1-node"
                " run",
            ),
            option(
                "--sweeps",
                nargs="+",
                default=None,
                metavar="GLOB",
                help="with --nodes: these sweeps instead, a glob per sweep matching its repetitions "
                "(e.g. 'runs/nodes-eval-frequency-1gbit-r*'); the case is read from each sweep.json",
            ),
        ),
    ),
)


def benchmark(name: str) -> Benchmark:
    """The registered benchmark called ``name``."""
    for entry in BENCHMARKS:
        if entry.name == name:
            return entry
    raise KeyError(f"no benchmark {name!r}: choose from {', '.join(b.name for b in BENCHMARKS)}")


def print_result(result: Any, args: argparse.Namespace, text: Any) -> None:
    """The result as JSON with ``--json``, else as ``text(result)`` renders it."""
    import json

    print(json.dumps(result, indent=2, default=str) if args.json else text(result))
