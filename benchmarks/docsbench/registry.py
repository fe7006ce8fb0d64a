"""Every benchmark and saved result behind the docs' measured tables, in one registry.

The benchmarks that only feed the docs (``workbench bench analysis``, ``timeline``, ``redraw``, ``live``,
``projection``, ``fuzz``) are ``Benchmark`` entries here, registered with ``workbench bench`` through the entry
point group ``workbench.benchmarks`` (``benchmarks/pyproject.toml``; ``make venv`` installs it), so their
commands read as before while their code stays out of the product package.

Every saved result behind the docs (``benchmarks/results/NAME.json``) is a ``Measurement`` in ``measurements()``:
``MEASUREMENTS`` below and each case's own (``docsbench.cases``, keyed by case name).
``benchmarks/measure_readme.sh`` runs them, the renderer reads what they saved, and a test checks every saved
result against its registered command.
"""

from __future__ import annotations

from dataclasses import replace

from docsbench.markdown import Measurement, varied
from workbench.bench import Benchmark, option

BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark(
        "analysis",
        "load + breakdown + POP + findings of a stored run (1 M events), one core, peak RSS",
        "docsbench.analysis",
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
            option(
                "--allreduce-parts",
                type=int,
                default=2,
                help="--split: allreduce transfers per step (a Horovod timeline's tensors; more: fewer steps)",
            ),
            option(
                "--minicluster",
                action="store_true",
                help="--split: also in rank groups on engines on the running miniature cluster's nodes, one a node",
            ),
        ),
    ),
    Benchmark(
        "timeline",
        "Horovod timeline import: MB/s and peak memory",
        "docsbench.timeline",
        (
            option("--mb", type=float, default=300.0, help="size of the synthetic timeline written first"),
            option("--path", default=None, help="import this timeline instead of a synthetic one"),
        ),
    ),
    Benchmark(
        "redraw",
        "timeline build and widget update with 8 x 10 000 spans",
        "docsbench.redraw",
        (option("--ranks", type=int, default=8), option("--spans-per-rank", type=int, default=10_000)),
    ),
    Benchmark(
        "live",
        "the live dashboard following a synthetic job (64 ranks; 1 024 with --ranks): refresh, latency",
        "docsbench.live",
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
        "scaling projection checked against saved sweeps (artifacts/), the published studies and published results",
        "docsbench.projection_check",
        (
            option("--allreduce", default=None, metavar="FILE", help="bench allreduce --json to fit"),
            option(
                "--seeds",
                action="store_true",
                help="only the published studies' clusters (004, 001) described without a run, beside their"
                    " published tables",
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
    Benchmark(
        "fuzz",
        "damaged traces of every format import reads: imported with the damage said, or refused in one line",
        "docsbench.fuzz",
        (
            option("--cases", type=int, default=500, help="damaged files made from each good one"),
            option("--first", type=int, default=0, help="the first case's number (cases are seeded by number)"),
        ),
    ),
)


# -- the saved results behind the docs -----------------------------------------------------------------------------

_SPLIT = "workbench bench analysis --split --events"
#: The miniature cluster the split measurements' ``--minicluster`` mode runs on (reused when it is up).
_NODES_UP = "workbench minicluster up --nodes 4 --cpus-per-node 0.4 --memory-per-node 2g > /dev/null && "
_PROJECTION_NODES = "workbench bench projection --nodes --json --sweeps"

#: What no case measures, in the order they run (stage 0 first; a case's runs are stage 1).
MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement("allreduce", "workbench bench allreduce --ranks 2 --json"),
    Measurement("overhead", "workbench bench overhead --tf-threads 1 --repetitions 1600 --json"),
    Measurement(
        "analysis-categorical", "workbench bench analysis --events 10000000 --ranks 64 --strings categorical --json"
    ),
    Measurement("analysis-object", "workbench bench analysis --events 10000000 --ranks 64 --strings object --json"),
    Measurement(
        "analysis-split-1m",
        f"{_SPLIT} 1000000 --ranks 64 --group-ranks 16 --repeats 3 --json",
        "a job of 8 ranks a node with slow nodes and late ranks, at once and in rank groups",
    ),
    Measurement(
        "analysis-split-10m",
        f"{_NODES_UP}{_SPLIT} 10000000 --ranks 1024 --minicluster --json",
        "also on a 4-node miniature cluster's engines",
        root=True,
    ),
    Measurement("analysis-split-30m", f"{_NODES_UP}{_SPLIT} 30000000 --ranks 1024 --minicluster --json", root=True),
    Measurement(
        "analysis-split-100m",
        f"{_NODES_UP}{_SPLIT} 100000000 --ranks 1024 --no-whole --workers 2 --minicluster --json",
        "only in groups: at once it was killed for memory after 82 s on this 24 GB machine",
        root=True,
    ),
    Measurement(
        "analysis-split-1b",
        f"{_NODES_UP}{_SPLIT} 1000000000 --ranks 4096 --allreduce-parts 240 --group-ranks 8 --no-whole --workers 2"
        " --repeats 1 --minicluster --json",
        "a timeline's 240 transfers a step (~1 000 steps a rank); at once it would need ~300 GB",
        root=True,
    ),
    Measurement(
        "fuzz",
        "workbench bench fuzz --cases 500 --json",
        "every format import reads, damaged 500 ways from each good file",
    ),
    Measurement("timeline", "workbench bench timeline --mb 300 --json"),
    Measurement("timeline-stream", "python benchmarks/timeline_stream.py --mb 5000 --json"),
    Measurement(
        "timeline-stream-1024", "python benchmarks/timeline_stream.py --mb 2000 --ranks 1024 --late-ranks 37,600 --json"
    ),
    Measurement(
        "import-traces",
        "python benchmarks/import_traces.py --timeline-mb 300 --xplane-mb 1000 --hosts 4 --json",
        "each format's import in a fresh process",
    ),
    Measurement(
        "peers",
        "python benchmarks/peers.py --json",
        "Holistic Trace Analysis beside the workbench on the same traces (make peers first)",
    ),
    Measurement("export", "python benchmarks/export_trace.py --events 10000000 --ranks 64 --json"),
    Measurement("redraw", "workbench bench redraw --json"),
    Measurement("live", "workbench bench live --ranks 64 --seconds 120 --json"),
    Measurement(
        "live-1024",
        "workbench bench live --ranks 1024 --seconds 60 --step-s 0.5 --flush-s 2 --refresh-s 1 --feed-processes 2"
        " --ranks-per-host 8 --slow-host 37 --json",
    ),
    Measurement("late-attach", "python benchmarks/late_attach.py --minutes 10 30 60 --unmerged-minutes 10 --json"),
    Measurement("dashboard-cost", "python benchmarks/dashboard_cost.py --preset reduced --repetitions 5"),
    Measurement("horovod-step", "workbench bench horovod-step --json"),
    Measurement("cpu-probe-cost", "python benchmarks/cpu_probe_cost.py --json", "the heartbeat's read of a wait"),
    Measurement(
        "midrun-faults",
        "python benchmarks/midrun_faults.py --json",
        "a link down, a link slowed and the run folder full mid-run on the miniature cluster",
    ),
    Measurement("cluster-start", "python benchmarks/cluster_start.py --json", "starting and stopping a local cluster"),
    *varied(
        Measurement(
            "fusion-copy-{link}",
            "python benchmarks/fusion_copy.py --link {link} --json",
            "what Horovod's fusion buffer adds to a step's allreduce on 2 nodes of 0.4 core",
            root=True,
        ),
        link=("unshaped", "1gbit"),
    ),
    Measurement(
        "quota-wait", "python benchmarks/quota_wait.py --json", "a wait on a node whose CPU is a quota", root=True
    ),
    Measurement("minicluster", "python benchmarks/minicluster.py --json", "the miniature cluster's nodes", root=True),
    Measurement(
        "idle-wait", "python benchmarks/idle_wait.py --json", "ranks waiting in MPI: polling, asleep", root=True
    ),
    Measurement(
        "idle-wait-unshaped",
        "python benchmarks/idle_wait.py --nodes 4 --cpus-per-node 0.4 --link unshaped --bytes 87e6 --allreduces 12"
        " --rounds 2 --json",
        root=True,
    ),
    Measurement(
        "recording-on-quota",
        "python benchmarks/recording_on_quota.py --json",
        "what recording costs a step on nodes of 0.2 core",
        root=True,
    ),
    Measurement(
        "recording-on-quota-before",
        "python benchmarks/recording_on_quota.py --flush-interval 0.25 --json",
        kept="the recorder before its lighter flushes (882c6da)",
    ),
    Measurement(
        "recording-on-quota-first",
        "python benchmarks/recording_on_quota.py --json",
        kept="the benchmark's first run, before its bare side was added",
    ),
    Measurement(
        "collective-after-compute",
        "python benchmarks/collective_after_compute.py --json",
        "the allreduce after a training step under a node's CPU quota",
        root=True,
    ),
    Measurement(
        "collective-after-compute-8nodes", "python benchmarks/collective_after_compute.py --nodes 8 --json", root=True
    ),
    # stage 2: what reads the results and sweeps above
    Measurement(
        "projection", "workbench bench projection --allreduce benchmarks/results/allreduce.json --json", stage=2
    ),
    Measurement("projection-seeds", "workbench bench projection --seeds --json", stage=2),
    Measurement("projection-published", "workbench bench projection --published --json", stage=2),
    Measurement("projection-nodes", "workbench bench projection --nodes --json", stage=2),
    Measurement(
        "projection-nodes-reduced-preset",
        f"{_PROJECTION_NODES} 'artifacts/lightrec/nodes-eval-frequency-reduced-0.4core-1gbit-r*'"
        " 'artifacts/lightrec/nodes-eval-frequency-0.4core-1gbit-r*'",
        stage=2,
    ),
    Measurement(
        "projection-nodes-sleeping",
        f"{_PROJECTION_NODES} 'artifacts/lightrec/nodes-eval-frequency-1gbit-r*'"
        " 'artifacts/sleepbatch/nodes-eval-frequency-50mbit-r*'"
        " 'artifacts/lightrec/nodes-eval-frequency-0.4core-1gbit-r*'"
        " 'artifacts/lightrec/nodes-eval-frequency-0.4core-50mbit-r*'"
        " 'artifacts/lightrec/nodes-input-pipeline-1gbit-r*'"
        " 'artifacts/lightrec/nodes-pop-scaling-1gbit-r*' 'artifacts/sleepbatch/nodes-pop-scaling-50mbit-r*'"
        " 'artifacts/lightrec/nodes-ps-vs-allreduce-unshaped-r*' 'artifacts/sleepbatch/nodes-ps-vs-allreduce-1gbit-r*'",
        stage=2,
    ),
    Measurement(
        "projection-nodes-cpu-wait", f"{_PROJECTION_NODES} 'artifacts/cpuwait/nodes-eval-frequency-1gbit-r*'", stage=2
    ),
    Measurement(
        "step-rhythm-eval-frequency",
        "python benchmarks/step_rhythm.py 'artifacts/lightrec/nodes-eval-frequency-1gbit-r*' --point k=20 --json",
        "a step's skeleton on the nodes of a sweep, beside the workload's own step split",
        stage=2,
        root=True,
    ),
    Measurement(
        "step-rhythm-pop-scaling",
        "python benchmarks/step_rhythm.py 'artifacts/sleepbatch/nodes-pop-scaling-1gbit-r*' --point weak --steps 60"
        " --json",
        stage=2,
        root=True,
    ),
    Measurement(
        "report-open", "python benchmarks/report_open.py", "the reduced sweeps' reports in headless Chromium", stage=2
    ),
    Measurement(
        "browser",
        "python benchmarks/browser_measurements.py",
        "what the browser test measured (event to screen, first figure, redraw)",
        stage=2,
    ),
)


def measurements() -> list[Measurement]:
    """Every saved result behind the docs and every sweep they read, in the order to measure them: by stage, a
    sweep's repetitions interleaved across cases (a round of each before the next), else as registered."""
    from docsbench.cases import case_docs
    from workbench.experiment import case_names

    found = [*MEASUREMENTS]
    for name in case_names():
        found += [m if m.stage else replace(m, stage=1) for m in case_docs(name).measurements]
    return sorted(found, key=lambda m: (m.stage, m.round))  # a stable sort: as registered within a round
