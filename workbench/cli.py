"""``workbench`` command line: doctor | bench NAME | run CASE | analyse RUN | compare A B | profile -- CMD."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.bench import all_benchmarks
from workbench.config import MPI_IMPLEMENTATIONS
from workbench.placement import PIN_GPUS

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _print_json(payload: Any) -> None:
    print(json.dumps(payload, indent=2, default=str))


def _cmd_doctor(args: argparse.Namespace) -> int:
    from workbench.commands import doctor

    require = tuple(name.strip() for name in (args.require or "").split(",") if name.strip())
    return doctor.main(as_json=args.json, quiet=args.quiet, require=require)


def _typed(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A case option's parser whose ValueError becomes argparse's one-line usage error."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return convert


def case_parser(case: Any) -> argparse.ArgumentParser:
    """``workbench run CASE ...``: the options every case has, then the case's own."""
    parser = argparse.ArgumentParser(prog=f"workbench run {case.name}", description=f"{case.title}: {case.about}")
    parser.add_argument(
        "--ranks",
        type=int,
        default=None,
        help="the most ranks any point of the sweep uses (default: this machine's physical cores, or the "
        "miniature cluster's nodes with --minicluster); scaling sweeps cover 1..N, single-size cases run at N",
    )
    parser.add_argument(
        "--minicluster",
        action="store_true",
        help="run the ranks on the miniature cluster `workbench minicluster up` started (one rank per node "
        "slot, under its Slurm) instead of on this machine",
    )
    parser.add_argument(
        "--nodes",
        default=None,
        metavar="COUNTS",
        help="node counts of a miniature cluster, e.g. 1,2,4,8: brings one up with the largest count (one rank per "
        "node; the same --cpus-per-node and --link at every count), runs the sweep at these counts only, measures "
        "the link (nodes.json beside the sweep) and takes the cluster down unless it was already up",
    )
    parser.add_argument(
        "--cpus-per-node", type=float, default=None, metavar="Q", help="with --nodes: each node's share of a core"
    )
    parser.add_argument("--link", default=None, help="with --nodes: each node's link rate, e.g. 1gbit or 10mbit")
    parser.add_argument(
        "--slots-per-node",
        type=int,
        default=None,
        metavar="S",
        help="with --nodes: the CPUs Slurm offers on each node (default: one per started core share), for "
        "several ranks or threads per node sharing its share",
    )
    parser.add_argument(
        "--preset",
        choices=tuple(case.presets),
        default=case.default_preset,
        help="ci: seconds (tests); reduced: minutes on 2 cores; full: the published study's shape",
    )
    parser.add_argument("--out", default=None, help=f"output directory (default: artifacts/{case.name})")
    parser.add_argument("--resume", action="store_true", help="keep the finished points of the sweep in --out")
    parser.add_argument("--json", action="store_true", help="print one JSON summary object")
    parser.add_argument(
        "--oversubscribe",
        action="store_true",
        help="allow more ranks than this machine's cores (ranks share cores); with --minicluster the nodes' "
        "slots are the limit",
    )
    parser.add_argument(
        "--threads-per-rank",
        type=int,
        default=None,
        metavar="T",
        help="cores each rank gets at every rank count (default: this machine's cores shared out between the "
        "ranks); 1 binds each rank to a core, so 1 rank runs on what each rank of the largest count has",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help="stop a point still running after S seconds: marked failed, the ranks' stacks saved beside its run",
    )
    for option in case.options:
        parser.add_argument(
            option.flag,
            dest=f"case_{option.field}",
            metavar=option.flag.strip("-").upper(),
            type=_typed(option.parse),
            help=option.help,
        )
    return parser


def _run_placement(options: argparse.Namespace) -> tuple[int | None, Any]:
    """Where ``workbench run``'s ranks go: (the most ranks, the ClusterConfig), on this machine or the minicluster.

    On the miniature cluster each node has its own share of the cores, so this machine's core
    count says nothing: the limit is the nodes' slots (one clear error naming the cluster's size).
    """
    from workbench.config import ClusterConfig, oversubscription_refused, physical_cores

    settings: dict[str, Any] = {}
    if options.oversubscribe:
        settings["oversubscribe"] = True
    if options.threads_per_rank is not None:
        settings["threads_per_rank"] = options.threads_per_rank
    if not options.minicluster:
        if options.ranks is not None and options.ranks > physical_cores() and not options.oversubscribe:
            raise ValueError(oversubscription_refused(options.ranks, "--oversubscribe"))
        return options.ranks, ClusterConfig(**settings)
    from workbench import minicluster

    mini = minicluster.running()  # one line when none is up; sets SLURM_CONF for sbatch and squeue
    ranks = options.ranks if options.ranks is not None else len(mini.node_names)
    return ranks, mini.cluster_config(ranks, **settings)


def _node_counts(options: argparse.Namespace) -> tuple[int, ...] | None:
    """``--nodes 1,2,4,8`` checked against the options it excludes; None without it."""
    from workbench.experiment import parse_counts

    if options.nodes is None:
        if options.cpus_per_node is not None or options.link is not None or options.slots_per_node is not None:
            raise ValueError(
                "--cpus-per-node, --link and --slots-per-node shape a miniature cluster: give --nodes too, "
                "e.g. --nodes 1,2,4"
            )
        return None
    if options.minicluster or options.ranks is not None:
        raise ValueError("--nodes brings its own miniature cluster (one rank per node): drop --minicluster and --ranks")
    return tuple(sorted(set(parse_counts(options.nodes, at_least=1, example="1,2,4,8"))))


def _cmd_run(args: argparse.Namespace) -> int:
    from workbench.cases import CASE_MODULES
    from workbench.experiment import Experiment, case_names, get_case
    from workbench.extras import require

    if args.list:
        for name in case_names():
            case = get_case(name)
            print(f"{name:<16} {case.about} [presets: {', '.join(case.presets)}]")
        return 0
    if not args.case:
        raise ValueError("name a case: workbench run --list shows them")
    case = get_case(args.case)
    options = case_parser(case).parse_args(args.case_args)
    overrides = {
        option.field: getattr(options, f"case_{option.field}")
        for option in case.options
        if getattr(options, f"case_{option.field}") is not None
    }
    if options.threads_per_rank is not None and options.threads_per_rank < 1:
        raise ValueError(f"--threads-per-rank {options.threads_per_rank}: use a whole number >= 1")

    def tell(point: Any, status: str) -> None:
        words = {"reused": "reusing", "start": "running", "failed": "failed (kept as a result)"}
        if status in words:
            print(f"  {words[status]}: {point.key}", file=sys.stderr)

    counts = _node_counts(options)
    if case.name in CASE_MODULES:  # the package's own cases train TensorFlow models on MPI ranks
        require("cases", for_what=f"workbench run {case.name}")
    if counts is not None:
        from workbench.node_sweep import node_sweep

        result = node_sweep(
            case,
            counts,
            cpus_per_node=options.cpus_per_node,
            link=options.link,
            slots_per_node=options.slots_per_node,
            preset=options.preset,
            out=options.out,
            resume=options.resume,
            timeout_s=options.timeout,
            progress=not options.json,
            on_point=None if options.json else tell,
            overrides=overrides,
        )
    else:
        ranks, cluster_config = _run_placement(options)
        experiment = Experiment(
            case, preset=options.preset, ranks=ranks, out=options.out, cluster_config=cluster_config, **overrides
        )
        result = experiment.run(
            resume=options.resume,
            progress=not options.json,
            on_point=None if options.json else tell,
            timeout_s=options.timeout,
        )
    if options.json:
        from workbench.analysis import json_records

        # the summary, and the table the text mode prints: what the README's tables are rendered from
        payload = {**result.summary, "headline": json_records(case.headline(result))}
        if counts is not None:  # which nodes: what a table of node rows is headed with
            from workbench.node_sweep import read_link_bytes, read_nodes_file

            facts = read_nodes_file(result.summary["out"]) or {}
            payload["cluster"] = {"node_counts": list(counts), "nodes": facts.get("nodes", [])}
            payload["link_bytes"] = read_link_bytes(result.summary["out"])
        _print_json(payload)
    else:
        print(case.headline(result).round(3).to_string(index=False))
        print()
        print(result.text())
        sweep = result.summary["sweep"]
        print(f"\nsweep: {sweep['points']} points, {sweep['ran']} ran, {sweep['reused']} reused")
        print(f"report: {result.report_path}")
    return 0 if case.healthy(result.summary) else 1


def _cmd_profile(args: argparse.Namespace) -> int:
    from workbench.commands.profile import profile_command
    from workbench.placement import place

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    minicluster = None
    if args.minicluster:
        from workbench.minicluster import MiniCluster

        minicluster = MiniCluster.running()  # none up: its one line says to run `workbench minicluster up`
    placement = place(
        ranks=args.ranks,
        hostfile=args.hostfile,
        ranks_per_node=args.ranks_per_node,
        minicluster=minicluster,
        mpi=args.mpi,
        bind_to=args.bind_to,
        launch_agent=args.launch_agent,
        mpi_args=tuple(args.mpi_arg),
    )
    return profile_command(
        command,
        out=args.out,
        name=args.name,
        timeline=not args.no_timeline,
        trace_steps=args.trace_steps,
        report=not args.no_report,
        placement=placement,
        pin_gpus=args.pin_gpus,
    )


def _cmd_analyse(args: argparse.Namespace) -> int:
    from workbench.commands.analyse import analyse_command

    if args.workers is not None and args.workers < 0:
        raise ValueError(f"--workers {args.workers}: give 0 (rank groups one at a time here) or more processes")
    if args.group_ranks is not None and args.group_ranks < 1:
        raise ValueError(f"--group-ranks {args.group_ranks}: give at least 1 rank per group")
    if args.group_ranks is not None and args.workers is None and not (args.hostfile or args.minicluster):
        raise ValueError(
            "--group-ranks sizes the rank groups of --workers, --hostfile or --minicluster: add one of them"
            " (--workers 0: one group at a time here)"
        )
    return analyse_command(
        args.run_dir,
        as_json=args.json,
        html=args.html,
        workers=args.workers,
        group_ranks=args.group_ranks,
        hostfile=args.hostfile,
        minicluster=args.minicluster,
        per_node=args.per_node,
        launch_agent=args.launch_agent,
    )


def _cmd_import(args: argparse.Namespace) -> int:
    from workbench.importer import import_traces

    result = import_traces(args.paths, out=args.out, name=args.name)
    for line in result.lines:
        print(f"  {line}")
    where = f" on {len(result.hosts)} host(s) ({', '.join(result.hosts)})" if result.hosts else ""
    print(
        f"run: {result.run_path} ({result.ranks} ranks{where}; {result.events} spans,"
        f" {result.device_activities} GPU activities)"
    )
    print(f"next: workbench analyse {result.run_path} --html report.html")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from workbench.formats.trace_export import export_trace

    out = Path(args.trace) if args.trace else Path(args.run_dir) / "trace.json.gz"
    if out.is_dir():  # a folder: the trace goes into it under its usual name
        out = out / "trace.json.gz"
    if not out.parent.is_dir():
        raise ValueError(f"--trace {args.trace}: the folder {out.parent} does not exist: create it or name another")
    result = export_trace(args.run_dir, out)
    print(
        f"trace: {result.path} ({result.bytes_written / 1e6:.3g} MB, {result.spans} spans and {result.samples}"
        f" samples of {result.ranks} ranks on {result.hosts} host(s), written in {result.seconds:.2g} s): open it at"
        " https://ui.perfetto.dev or chrome://tracing"
    )
    return 0


def _cmd_project(args: argparse.Namespace) -> int:
    from workbench.commands.project import (
        changes_from_arguments,
        layout_from_arguments,
        project_command,
        system_from_arguments,
    )
    from workbench.events import BYTES_PER_MB

    run_overrides: dict[str, Any] = {}
    described_only = ("system", "parameters", "step_time", "throughput", "devices_per_node", "input_period")
    described_only += ("step_spread", "samples_per_epoch", "epochs", "eval_seconds")
    if args.run_dirs and all(getattr(args, name) is None for name in described_only):
        # with runs, --gradient-mb and --batch add what a run did not record (a profiled script's batch)
        run_overrides = {
            "gradient_bytes": args.gradient_mb * BYTES_PER_MB if args.gradient_mb else None,
            "batch_per_rank": args.batch,
            "gradient_layout": layout_from_arguments(args),
        }
        args.gradient_mb = args.batch = args.model = args.gradients = None
    system = system_from_arguments(args)
    if system is None and not args.run_dirs:
        raise ValueError(
            "workbench project needs run directories, or a system to describe: --system FILE, or --parameters"
            " (or --gradient-mb), --step-time (or --throughput) and --batch"
        )
    if system is not None and args.run_dirs:
        raise ValueError(
            "give run directories or a described system (--system, --parameters, ...), not both; with runs,"
            " only --gradient-mb, --batch, --model and --gradients apply"
        )
    return project_command(
        args.run_dirs,
        changes=changes_from_arguments(args),
        ranks=args.ranks,
        network_name=args.network,
        ranks_per_node=args.ranks_per_node,
        allreduce_json=args.allreduce,
        kind=args.kind,
        system=system,
        nodes=args.nodes,
        **run_overrides,
        as_json=args.json,
        html=args.html,
    )


def _cmd_compare(args: argparse.Namespace) -> int:
    from workbench.commands.compare import compare_command

    return compare_command(args.run_a, args.run_b, as_json=args.json, html=args.html)


def _add_doctor_command(sub: Any) -> None:
    """`workbench doctor`."""
    doctor = sub.add_parser(
        "doctor", help="what is installed, how it was built, and what each part of the workbench can do here"
    )
    doctor.add_argument("--json", action="store_true", help="print one JSON object")
    doctor.add_argument("--quiet", action="store_true", help="print only problems")
    doctor.add_argument(
        "--require",
        default=None,
        metavar="PARTS",
        help="exit 1 unless these parts work here, e.g. record,cluster,notebook (`make venv` requires all but nvml)",
    )
    doctor.set_defaults(handler=_cmd_doctor)


def _add_bench_command(sub: Any) -> None:
    """`workbench bench NAME`: one subcommand per registered benchmark."""
    bench = sub.add_parser("bench", help="measure this machine: allreduce, recording overhead, Horovod's cost per step")
    bench_sub = bench.add_subparsers(dest="bench_name", required=True)
    for benchmark in all_benchmarks():
        benchmark.add_to(bench_sub)


def _add_run_command(sub: Any) -> None:
    """`workbench run CASE`."""
    run = sub.add_parser(
        "run",
        help="run a case study headless: results as Parquet + one HTML report",
        description="workbench run CASE [--ranks N] [--preset P] [--out DIR] [--resume] [--json] [case options]; "
        "workbench run CASE --help lists the case's options",
        add_help=False,
    )
    run.add_argument("--list", action="store_true", help="list the cases, one line each")
    run.add_argument("case", nargs="?", help="a case name (workbench run --list)")
    run.add_argument("case_args", nargs=argparse.REMAINDER, help="the case's options")
    run.set_defaults(handler=_cmd_run)


def _add_profile_command(sub: Any) -> None:
    """`workbench profile -- CMD`."""
    profile = sub.add_parser("profile", help="profile an unmodified training script on N ranks")
    profile.add_argument(
        "--ranks", type=int, default=None, help="ranks (default: 2; inside salloc/sbatch the allocation's tasks)"
    )
    where = profile.add_argument_group("where the ranks run (default: this machine, or the Slurm allocation it is in)")
    where.add_argument("--hostfile", default=None, help="an MPI hostfile: 'node1 slots=2' (Open MPI) or 'node1:2'")
    where.add_argument("--ranks-per-node", type=int, default=None, metavar="N", help="ranks placed on each host")
    where.add_argument(
        "--minicluster", action="store_true", help="on the miniature cluster `workbench minicluster up` made (salloc)"
    )
    where.add_argument("--mpi", choices=MPI_IMPLEMENTATIONS, default="openmpi", help="the MPI that launches the ranks")
    where.add_argument(
        "--bind-to", default=None, help="binding: core, socket, none (default: core on this machine alone, else none)"
    )
    where.add_argument(
        "--launch-agent", default=None, metavar="CMD", help="what starts the launcher on other hosts instead of ssh"
    )
    where.add_argument(
        "--mpi-arg", action="append", default=[], metavar="ARG", help="one more mpiexec argument (repeatable)"
    )
    where.add_argument(
        "--pin-gpus",
        choices=PIN_GPUS,
        default="auto",
        help="one GPU per rank by its local rank (CUDA_VISIBLE_DEVICES); auto: unless the script chooses its own",
    )
    profile.add_argument("--out", default=None, help="run store root (default: $WORKBENCH_RUNS or ./runs)")
    profile.add_argument("--name", default=None)
    profile.add_argument("--no-timeline", action="store_true", help="do not switch on Horovod's timeline")
    profile.add_argument(
        "--trace-steps",
        default=None,
        metavar="A:B",
        help="run steps A..B-1 under TensorFlow's profiler: per-rank allreduce waits (e.g. 5:10)",
    )
    profile.add_argument("--no-report", action="store_true", help="do not write the HTML report")
    profile.add_argument("command", nargs=argparse.REMAINDER, help="-- python train.py ARGS")
    profile.set_defaults(handler=_cmd_profile)


def _add_analyse_command(sub: Any) -> None:
    """`workbench analyse RUN`."""
    analyse = sub.add_parser("analyse", help="breakdown, POP metrics, findings and steps of a recorded run")
    analyse.add_argument("run_dir", help="a run directory, e.g. runs/<run_id>")
    analyse.add_argument("--json", action="store_true", help="print one JSON object")
    analyse.add_argument("--html", default=None, metavar="FILE", help="also write the HTML report to FILE")
    analyse.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="analyse in rank groups on N local processes (0: one group at a time here): runs of hundreds of ranks",
    )
    analyse.add_argument("--group-ranks", type=int, default=None, metavar="G", help="ranks per group (default 32)")
    nodes = analyse.add_argument_group(
        "rank groups on the cluster's nodes (inside a Slurm allocation of several nodes: its nodes, when the run"
        " does not fit here); each node reads its groups' ranks from the run directory, which every node must see"
    )
    nodes.add_argument("--hostfile", default=None, help="an MPI hostfile: an engine on each of its hosts")
    nodes.add_argument("--minicluster", action="store_true", help="an engine on each node of the miniature cluster")
    nodes.add_argument("--per-node", type=int, default=1, metavar="N", help="engines on each node (default 1)")
    nodes.add_argument(
        "--launch-agent", default=None, metavar="CMD", help="what starts the launcher on other hosts instead of ssh"
    )
    analyse.set_defaults(handler=_cmd_analyse)


def _add_compare_command(sub: Any) -> None:
    """`workbench compare A B`."""
    compare = sub.add_parser("compare", help="where the time went differently in two runs, per rank and phase")
    compare.add_argument("run_a", help="run directory A (the baseline)")
    compare.add_argument("run_b", help="run directory B (deltas are B - A)")
    compare.add_argument("--json", action="store_true", help="print one JSON object")
    compare.add_argument("--html", default=None, metavar="FILE", help="also write the HTML report to FILE")
    compare.set_defaults(handler=_cmd_compare)


def _add_import_command(sub: Any) -> None:
    """`workbench import PATH...`."""
    imported = sub.add_parser(
        "import",
        help="traces a GPU cluster wrote (Horovod timelines; TF profiles: *.xplane.pb, *.trace.json.gz; PyTorch"
        " profiler traces) as one run",
    )
    imported.add_argument(
        "paths", nargs="+", help="trace files, or folders holding them (a TensorBoard log folder); one job's files"
    )
    imported.add_argument("--out", default=None, help="where runs go (default $WORKBENCH_RUNS or ./runs)")
    imported.add_argument("--name", default=None, help="the run's name (default: import-<folder>)")
    imported.set_defaults(handler=_cmd_import)


def _add_export_command(sub: Any) -> None:
    """`workbench export RUN`."""
    export = sub.add_parser("export", help="a run as one trace for ui.perfetto.dev and chrome://tracing")
    export.add_argument("run_dir", help="a run directory, e.g. runs/<run_id>")
    export.add_argument(
        "--trace",
        "--perfetto",
        default=None,
        metavar="FILE",
        help="where to write it (default RUN/trace.json.gz; .gz compresses; Trace Event Format JSON)",
    )
    export.set_defaults(handler=_cmd_export)


def _add_project_command(sub: Any) -> None:
    """`workbench project`."""
    project = sub.add_parser("project", help="project recorded runs to more ranks: step time, efficiency, limits")
    project.add_argument(
        "run_dirs", nargs="*", help="run directories; the fewest ranks builds the model (or describe a system below)"
    )
    project.add_argument("--ranks", default="8,16,32,64", help="rank counts to project, e.g. 8,16,32,64")
    project.add_argument(
        "--network",
        default=None,
        help="10gbe (default), 100g-infiniband, nvlink, aries, aws-high,"
        " aws-10g-8gpu, here (fitted to `workbench bench allreduce` on this machine) or reference-vm (the"
        " documented 2-core reference system)",
    )
    project.add_argument(
        "--ranks-per-node", type=int, default=None, help="ranks sharing a node (overrides the network's)"
    )
    project.add_argument("--allreduce", default=None, metavar="FILE", help="fit the network to bench allreduce --json")
    project.add_argument("--kind", choices=("weak", "strong"), default="weak")
    project.add_argument("--scheme", choices=("allreduce", "ps"), default="allreduce")
    project.add_argument("--eval-interval", type=int, default=None, help="what-if: evaluate every K epochs")
    project.add_argument("--shard-evaluation", action="store_true", help="what-if: evaluation split over all ranks")
    project.add_argument("--batch-scale", type=float, default=1.0, help="what-if: per-rank batch times this")
    project.add_argument("--fusion-threshold-mb", type=float, default=None, help="what-if: HOROVOD_FUSION_THRESHOLD")
    project.add_argument(
        "--epoch-samples",
        type=int,
        default=None,
        metavar="N",
        help="the training set's size: each rank takes whole batches of its shard (N / ranks // batch steps an"
        " epoch, the partial batch dropped) instead of the measured steps shared out",
    )
    project.add_argument("--json", action="store_true", help="print one JSON object")
    project.add_argument("--html", default=None, metavar="FILE", help="also write the HTML report to FILE")
    project.add_argument(
        "--servers", type=int, default=None, help="--scheme ps: parameter servers (default 1 per node)"
    )
    project.add_argument(
        "--server-shares",
        default=None,
        metavar="LIST",
        help="--scheme ps: each server's share of the variables, e.g. 0.999,0.001 (default: even)",
    )
    project.add_argument(
        "--servers-on-workers",
        action="store_true",
        help="--scheme ps: server j runs on worker node j mod nodes (default: hosts of their own)",
    )
    project.add_argument(
        "--asynchronous",
        action="store_true",
        help="--scheme ps: workers step on their own (ClusterCoordinator), no barrier between steps",
    )
    project.add_argument(
        "--server-exchange",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="--asynchronous: node seconds one step's pull and push take through the RPCs (a 1-node PS run's"
        " step less the allreduce run's)",
    )
    project.add_argument(
        "--overlap", type=float, default=0.0, help="share of a step's compute the collective hides behind (0-1)"
    )
    _add_described_system_arguments(project)
    project.set_defaults(handler=_cmd_project)


def _add_described_system_arguments(project: argparse.ArgumentParser) -> None:
    """`workbench project`'s flags that describe a system instead of runs (and the model's gradients)."""
    described = project.add_argument_group(
        "a system instead of runs", "project a cluster before it exists: the model, one device's speed, the nodes"
    )
    described.add_argument("--system", default=None, metavar="FILE", help="a JSON or YAML file with the fields below")
    described.add_argument("--parameters", default=None, help="the model's parameters, e.g. 23.8M (fp32 gradients)")
    described.add_argument(
        "--gradient-mb",
        type=float,
        default=None,
        help="or the gradient megabytes per step (with runs: replaces what the run recorded)",
    )
    described.add_argument("--step-time", type=float, default=None, help="one device's seconds per training step")
    described.add_argument("--throughput", type=float, default=None, help="or one device's samples per second")
    described.add_argument(
        "--batch", type=int, default=None, help="samples per device per step (with runs: what --epoch-samples needs)"
    )
    described.add_argument("--devices-per-node", type=int, default=None, help="devices (ranks) per node (default 1)")
    described.add_argument("--nodes", default=None, help="node counts to project, e.g. 1,2,4,8 (default 1,2,4,...,64)")
    described.add_argument("--input-period", type=float, default=None, help="input pipeline seconds per step")
    described.add_argument("--step-spread", type=float, default=None, help="steps vary by +- this share (stragglers)")
    described.add_argument("--samples-per-epoch", type=float, default=None, help="training samples per epoch")
    described.add_argument("--epochs", type=int, default=None)
    described.add_argument("--eval-seconds", type=float, default=None, help="serial evaluation seconds per epoch")
    described.add_argument(
        "--bandwidth-gbs", type=float, default=None, help="between nodes, GB/s (overrides --network)"
    )
    described.add_argument("--latency-us", type=float, default=None, help="between nodes, µs (overrides --network)")
    described.add_argument(
        "--model",
        default=None,
        help="the model's gradients in backprop order, so Horovod's overlap with backprop is played: resnet50,"
        " resnet101, resnet152, inception_v3, vgg16 (shipped), another tf.keras.applications name (built here)",
    )
    described.add_argument(
        "--gradients",
        default=None,
        metavar="FILE",
        help='or your model\'s: JSON {"tensors": [{"name", "parameters" or "bytes", "flops"}, ...]}, last layer first',
    )
    described.add_argument(
        "--cycle-ms", type=float, default=None, help="Horovod's cycle (HOROVOD_CYCLE_TIME), default 1 ms"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="workbench", description=__doc__)
    sub = parser.add_subparsers(dest="command_name", required=True)
    _add_doctor_command(sub)
    _add_bench_command(sub)
    _add_run_command(sub)
    _add_profile_command(sub)
    _add_analyse_command(sub)
    _add_compare_command(sub)
    _add_import_command(sub)
    _add_export_command(sub)
    _add_project_command(sub)
    from workbench.commands import minicluster

    minicluster.add_parser(sub)
    return parser


class _Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, a batch system's time limit, ``kill``), raised where the command is, as Ctrl-C is."""


def _terminate(signum: int, _frame: Any) -> None:
    raise _Terminated


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    # SIGTERM would end the process where it stands: a sweep's miniature cluster and its ranks stayed up, a
    # run stayed "running". As an exception, the commands' clean-up runs (the cluster is taken down, the run
    # marked interrupted); ``workbench profile`` installs its own handler while the script runs.
    try:
        previous = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread (a caller's own thread): leave signals alone
        previous = None
    try:
        return handler(args)
    except _Terminated:
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # one clear message instead of a traceback; details below it
        message = str(error).strip().splitlines()
        print(f"workbench: {message[0] if message else type(error).__name__}", file=sys.stderr)
        for line in message[1:40]:
            print(f"  {line}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
