"""``workbench bench NAME``: what the product measures on the user's own machine, and the command line of any
benchmark registered from outside the package.

A benchmark is a module with ``command(args) -> int`` (the measurement, then a table or, with ``--json``, its
result as JSON) and one ``Benchmark`` entry: name, help and options. The options are data, so that building the
command line imports no benchmark (several start TensorFlow). The package's own measure the user's machine:
``allreduce`` (what ``workbench project --allreduce`` fits a network to), ``overhead`` (what recording costs a
training step) and ``horovod-step`` (Horovod's cost per step and cycle time). Others come from the entry point
group ``workbench.benchmarks``, each a sequence of ``Benchmark`` (this repository's docs benchmarks register
there: ``benchmarks/docsbench``).
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from typing import Any

#: Where other packages register benchmarks: each entry point names a sequence of ``Benchmark``.
ENTRY_POINT_GROUP = "workbench.benchmarks"

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
        "horovod-step",
        "Horovod's cost per step on 2 ranks: grouped, fused, in-graph, cycle times",
        "workbench.bench.horovod_step",
        (
            option("--steps", type=int, default=300, help="steps per timed block"),
            option("--rounds", type=int, default=5, help="interleaved rounds; the median is reported"),
        ),
    ),
)


def all_benchmarks() -> tuple[Benchmark, ...]:
    """The package's benchmarks, then those registered under ``workbench.benchmarks`` (a name taken is kept)."""
    from importlib.metadata import entry_points

    found = {entry.name: entry for entry in BENCHMARKS}
    for point in entry_points(group=ENTRY_POINT_GROUP):
        for entry in point.load():
            found.setdefault(entry.name, entry)
    return tuple(found.values())


def benchmark(name: str) -> Benchmark:
    """The registered benchmark called ``name``."""
    for entry in all_benchmarks():
        if entry.name == name:
            return entry
    raise KeyError(f"no benchmark {name!r}: choose from {', '.join(b.name for b in all_benchmarks())}")


def print_result(result: Any, args: argparse.Namespace, text: Any) -> None:
    """The result as JSON with ``--json``, else as ``text(result)`` renders it."""
    import json

    print(json.dumps(result, indent=2, default=str) if args.json else text(result))
