"""``workbench`` command line: doctor | bench NAME | run CASE | profile -- CMD."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _print_json(payload: Any) -> None:
    print(json.dumps(payload, indent=2, default=str))


def _cmd_doctor(args: argparse.Namespace) -> int:
    from workbench import doctor

    return doctor.main(as_json=args.json, quiet=args.quiet)


def _cmd_bench_allreduce(args: argparse.Namespace) -> int:
    from workbench.bench import allreduce
    from workbench.config import ClusterConfig

    config = ClusterConfig(
        n=args.ranks, mpi=args.mpi, horovod_cycle_time_ms=args.cycle_time_ms, bind_to=args.bind_to
    )
    rows = allreduce.run(args.ranks, config=config, min_seconds=args.min_seconds)
    if args.json:
        _print_json(rows)
    else:
        print(f"allreduce on {args.ranks} ranks ({args.mpi}); busbw = algbw * 2(n-1)/n")
        print(allreduce.format_table(rows))
    return 0


def _cmd_bench_overhead(args: argparse.Namespace) -> int:
    from workbench.bench import overhead

    result = overhead.run(repetitions=args.repetitions, steps=args.steps)
    _print_json(result) if args.json else print(overhead.format_result(result))
    return 0


def _cmd_bench_analysis(args: argparse.Namespace) -> int:
    from workbench.bench import analysis

    result = analysis.run(events=args.events, ranks=args.ranks)
    _print_json(result) if args.json else print(f"{result['events']} events: {result['seconds']:.3f} s")
    return 0


def _cmd_bench_redraw(args: argparse.Namespace) -> int:
    from workbench.bench import redraw

    result = redraw.run(ranks=args.ranks, spans_per_rank=args.spans_per_rank)
    _print_json(result)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from workbench.cases import run_case

    return run_case(args.case, args)


def _cmd_profile(args: argparse.Namespace) -> int:
    from workbench.profile import profile_command

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return profile_command(command, ranks=args.ranks, out=args.out, name=args.name, timeline=not args.no_timeline)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="workbench", description=__doc__)
    sub = parser.add_subparsers(dest="command_name", required=True)

    doctor = sub.add_parser("doctor", help="what is installed and how it was built")
    doctor.add_argument("--json", action="store_true", help="print one JSON object")
    doctor.add_argument("--quiet", action="store_true", help="print only problems")
    doctor.set_defaults(handler=_cmd_doctor)

    bench = sub.add_parser("bench", help="benchmarks behind the README's figures")
    bench_sub = bench.add_subparsers(dest="bench_name", required=True)
    allreduce = bench_sub.add_parser("allreduce", help="allreduce bus bandwidth: MPI beside Horovod")
    allreduce.add_argument("--ranks", type=int, default=2)
    allreduce.add_argument("--mpi", choices=("openmpi", "mpich"), default="openmpi")
    allreduce.add_argument("--cycle-time-ms", type=float, default=None, help="HOROVOD_CYCLE_TIME")
    allreduce.add_argument("--bind-to", default=None, help="mpiexec binding (core, none, ...)")
    allreduce.add_argument("--min-seconds", type=float, default=0.25, help="time measured per size and library")
    allreduce.add_argument("--json", action="store_true")
    allreduce.set_defaults(handler=_cmd_bench_allreduce)
    overhead = bench_sub.add_parser("overhead", help="training throughput with and without recording")
    overhead.add_argument("--repetitions", type=int, default=20, help="paired blocks")
    overhead.add_argument("--steps", type=int, default=100, help="steps per block")
    overhead.add_argument("--json", action="store_true")
    overhead.set_defaults(handler=_cmd_bench_overhead)
    analysis = bench_sub.add_parser("analysis", help="breakdown + POP metrics on 1 M events")
    analysis.add_argument("--events", type=int, default=1_000_000)
    analysis.add_argument("--ranks", type=int, default=8)
    analysis.add_argument("--json", action="store_true")
    analysis.set_defaults(handler=_cmd_bench_analysis)
    redraw = bench_sub.add_parser("redraw", help="timeline build and widget update with 8 x 10 000 spans")
    redraw.add_argument("--ranks", type=int, default=8)
    redraw.add_argument("--spans-per-rank", type=int, default=10_000)
    redraw.add_argument("--json", action="store_true")
    redraw.set_defaults(handler=_cmd_bench_redraw)

    run = sub.add_parser("run", help="run a case study headless: results as Parquet + one HTML report")
    run.add_argument("case", help="eval-frequency | predict-leak")
    run.add_argument("--ranks", type=int, default=None, help="largest rank count (default: cores)")
    run.add_argument("--preset", choices=("ci", "reduced", "full"), default="reduced",
                     help="ci: seconds (tests); reduced: minutes on 2 cores; full: the seed's shape")
    run.add_argument("--out", default=None, help="output directory (default: artifacts/<case>)")
    run.add_argument("--backend", choices=("horovod", "mpi4py", "both"), default="both")
    run.add_argument("--json", action="store_true", help="print one JSON summary object")
    run.set_defaults(handler=_cmd_run)

    profile = sub.add_parser("profile", help="profile an unmodified training script on N ranks")
    profile.add_argument("--ranks", type=int, default=2)
    profile.add_argument("--out", default=None, help="run store root (default: $WORKBENCH_RUNS or ./runs)")
    profile.add_argument("--name", default=None)
    profile.add_argument("--no-timeline", action="store_true", help="do not switch on Horovod's timeline")
    profile.add_argument("command", nargs=argparse.REMAINDER, help="-- python train.py ARGS")
    profile.set_defaults(handler=_cmd_profile)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # one clear message instead of a traceback; details below it
        message = str(error).strip().splitlines()
        print(f"workbench: {message[0] if message else type(error).__name__}", file=sys.stderr)
        for line in message[1:40]:
            print(f"  {line}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
