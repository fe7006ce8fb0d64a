"""`workbench profile` where users train: in salloc, from an sbatch script, from a hostfile, on the miniature cluster.

The script is a plain Horovod TF2 script (``scripts/train_slow_rank.py``) whose last rank sleeps ``SLOW_MS`` before
each step: the truth is that rank's node, and about ``SLOW_MS`` a step lost by the others waiting for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.analysis import analyse_run
from workbench.store import RunData, read_run_meta

SCRIPT = Path(__file__).parent / "scripts" / "train_slow_rank.py"
STEPS = 20
SLOW_MS = 100.0
WORKBENCH = str(Path(sys.executable).parent / "workbench")
#: A whole core per node for these tests (the package's cluster has 0.4): most of each run is TensorFlow
#: starting on every rank, and two nodes of a core each still fit this machine's two cores.
CPUS_PER_NODE = 1.0


@pytest.fixture
def nodes(restored):
    """The package's miniature cluster with a core per node, given back as it was after the test."""
    for node in restored.node_names:
        restored.set_cpus(node, CPUS_PER_NODE)
    return restored


def _environment() -> dict[str, str]:
    """This process's environment with the venv first on PATH (as an activated venv), SLURM_CONF from the fixture."""
    return {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}


def _profile(command: list[str], cwd: Path, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, cwd=cwd, env=_environment(), capture_output=True, text=True, timeout=timeout_s)
    print(f"\n$ {' '.join(command)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def _the_run(root: Path) -> Path:
    runs = [path for path in root.iterdir() if (path / "run.json").is_file()]
    assert len(runs) == 1, runs
    return runs[0]


def _check_the_truth(run_path: Path, hosts: dict[int, str]) -> dict:
    """Hosts, steps and the straggler against what the script does; returns the straggler finding."""
    run = RunData.load(run_path)
    assert dict(zip(run.rank_meta["rank"], run.rank_meta["host"])) == hosts
    steps = run.events[run.events["name"] == "train_step"].groupby("rank").size().to_dict()
    assert steps == {rank: STEPS for rank in hosts}
    result = analyse_run(run.events, run.memory, run.meta, rank_meta=run.rank_meta, counters=run.counters)
    findings = result.findings.set_index("kind")
    assert "straggler" in findings.index, result.findings[["kind", "text"]]
    straggler = findings.loc["straggler"]
    slow = max(hosts)
    # every step but the first (its tracing and the broadcast dwarf the sleep) makes the others wait SLOW_MS
    truth = (STEPS - 1) * SLOW_MS / 1000
    print(f"straggler: {straggler['text']} (truth {truth:.3g} s)")
    assert straggler["ranks"] == str(slow) and f"rank {slow} ({hosts[slow]})" in straggler["text"]
    assert straggler["seconds_lost"] == pytest.approx(truth, rel=0.25)
    return straggler


def test_salloc_profile_records_both_nodes_names_the_slow_ranks_node_and_aligns_their_clocks(nodes, tmp_path):
    command = ["salloc", "-N2", "-n2", "--time=10", WORKBENCH, "profile", "--out", str(tmp_path), "--no-report"]
    result = _profile([*command, "--", "python", str(SCRIPT), str(STEPS), str(SLOW_MS)], tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "2 ranks by mpiexec (openmpi) on Slurm job" in result.stderr
    assert "rank 1 (node2)" in result.stdout
    run_path = _the_run(tmp_path)
    _check_the_truth(run_path, {0: "node1", 1: "node2"})
    meta = read_run_meta(run_path)
    assert meta["config"]["placement"]["kind"] == "allocation" and meta["config"]["placement"]["hosts"] == [
        "node1",
        "node2",
    ]
    # across hosts the ranks' clocks were aligned to rank 0's and their links measured (after hvd.init)
    facts = RunData.load(run_path).rank_meta.set_index("rank")
    assert facts.loc[1, "clock_precision_ns"] > 0
    assert {link["host"] for link in meta["links"].values()} == {"node1", "node2"}
    assert all(link["bytes_per_s"] > 1e6 for link in meta["links"].values())


def test_an_sbatch_script_that_calls_profile_records_its_allocations_nodes(nodes, tmp_path):
    batch, exit_code = tmp_path / "job.sh", tmp_path / "exit-code"
    batch.write_text(
        "#!/bin/bash\n#SBATCH --nodes=2 --ntasks=2 --time=10\n"
        f"{WORKBENCH} profile --out {tmp_path / 'runs'} --no-report -- python {SCRIPT} {STEPS} {SLOW_MS}\n"
        f"echo $? > {exit_code}\n"
    )
    output = tmp_path / "job.out"
    result = _profile(["sbatch", "--parsable", f"--output={output}", str(batch)], tmp_path)
    assert result.returncode == 0, result.stderr
    job = result.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 600
    # sbatch --wait polls at growing intervals (about 20 s late here): the job's queue entry is asked instead
    while time.monotonic() < deadline and subprocess.run(["squeue", "-h", "-j", job], capture_output=True).stdout:
        time.sleep(0.5)
    text = output.read_text()
    print(text[-3000:])
    assert exit_code.read_text().strip() == "0", text[-2000:]
    assert "rank 1 (node2)" in text
    _check_the_truth(_the_run(tmp_path / "runs"), {0: "node1", 1: "node2"})


def test_a_hostfile_run_starts_its_daemons_through_the_launch_agent(nodes, tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("node3 slots=1\nnode4 slots=1\n")
    command = [WORKBENCH, "profile", "--hostfile", str(hosts), "--launch-agent", f"{WORKBENCH} minicluster exec"]
    command += ["--out", str(tmp_path / "runs"), "--no-report"]
    result = _profile([*command, "--", "python", str(SCRIPT), str(STEPS), str(SLOW_MS)], tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "on the hostfile's 2 hosts (node3, node4)" in result.stderr
    _check_the_truth(_the_run(tmp_path / "runs"), {0: "node3", 1: "node4"})


def test_minicluster_profile_with_mpich_records_both_nodes_and_the_slow_rank(nodes, tmp_path):
    command = [WORKBENCH, "profile", "--minicluster", "--ranks", "2", "--mpi", "mpich", "--out", str(tmp_path)]
    result = _profile([*command, "--no-report", "--", "python", str(SCRIPT), str(STEPS), str(SLOW_MS)], tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "2 ranks by mpiexec (mpich) on the miniature cluster's nodes (node1, node2) through salloc" in result.stderr
    run_path = _the_run(tmp_path)
    assert read_run_meta(run_path)["config"]["cluster"]["mpi"] == "mpich"
    _check_the_truth(run_path, {0: "node1", 1: "node2"})


def test_a_launcher_that_cannot_start_a_rank_is_one_line_naming_its_reason(nodes, tmp_path):
    """``--bind-to core`` on nodes whose cpusets withhold core 0 from node2: Open MPI refuses rank 1 before it runs."""
    command = [WORKBENCH, "profile", "--minicluster", "--ranks", "2", "--bind-to", "core", "--out", str(tmp_path)]
    result = _profile([*command, "--", "python", str(SCRIPT), "3", "0"], tmp_path, timeout_s=300)
    assert result.returncode != 0
    ours = [line for line in result.stderr.splitlines() if line.startswith("workbench profile:")]
    verdict = [line for line in ours if "started the script" in line]
    assert len(verdict) == 1, ours
    assert "could not start the ranks on node2" in verdict[0] and "hwloc_set_cpubind" in verdict[0]
    assert "--bind-to none" in verdict[0]
    assert not any("the script failed" in line or "never initialised Horovod" in line for line in ours), ours
