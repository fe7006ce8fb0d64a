"""A rank's wait for a core: the probe's reading of /proc and cgroups, the recorder's counters, the finding."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

import workbench.cpu_probe as probe_module
from workbench.analysis import analyse_run, cpu_wait_finding, cpu_wait_table
from workbench.cpu_probe import CpuWaitProbe, find_cpu_quota, thread_run_delays, throttled_periods
from workbench.events import CPU_PERCENT, CPU_THROTTLED_PERCENT, CPU_WAIT_PERCENT, events_frame
from workbench.recorder import Recorder
from workbench.store import RunData, create_run

linux_only = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="per-thread schedstat is Linux's")


def write(path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# -- the probe ----------------------------------------------------------------------------------------
def test_the_quota_is_found_on_the_process_cgroup_or_an_ancestor_in_cgroup_v1_and_v2(tmp_path):
    v1 = tmp_path / "v1"
    write(v1 / "proc" / "cgroup", "4:memory:/job\n3:cpu,cpuacct:/kubepods/pod1/ctr\n0::/\n")
    mount = v1 / "sys" / "cpu,cpuacct"
    write(mount / "kubepods" / "pod1" / "ctr" / "cpu.cfs_quota_us", "-1\n")  # no quota of its own
    write(mount / "kubepods" / "pod1" / "ctr" / "cpu.cfs_period_us", "100000\n")
    write(mount / "kubepods" / "pod1" / "cpu.cfs_quota_us", "250000\n")  # the pod's: 2.5 cores
    write(mount / "kubepods" / "pod1" / "cpu.cfs_period_us", "100000\n")
    assert find_cpu_quota(v1 / "proc" / "cgroup", v1 / "sys") == (mount / "kubepods" / "pod1" / "cpu.stat", 2.5)

    v2 = tmp_path / "v2"
    write(v2 / "proc" / "cgroup", "0::/slurm/job7\n")
    write(v2 / "sys" / "slurm" / "job7" / "cpu.max", "40000 100000\n")
    assert find_cpu_quota(v2 / "proc" / "cgroup", v2 / "sys") == (v2 / "sys" / "slurm" / "job7" / "cpu.stat", 0.4)
    write(v2 / "sys" / "slurm" / "job7" / "cpu.max", "max 100000\n")  # no quota here nor above
    assert find_cpu_quota(v2 / "proc" / "cgroup", v2 / "sys") is None
    assert find_cpu_quota(tmp_path / "absent", tmp_path) is None


def test_throttled_periods_read_from_either_cgroup_versions_cpu_stat(tmp_path):
    write(tmp_path / "v1", "nr_periods 200\nnr_throttled 50\nthrottled_time 123456\n")
    write(
        tmp_path / "v2", "usage_usec 9\nuser_usec 5\nsystem_usec 4\nnr_periods 10\nnr_throttled 3\nthrottled_usec 7\n"
    )
    assert throttled_periods(tmp_path / "v1") == (200, 50)
    assert throttled_periods(tmp_path / "v2") == (10, 3)
    assert throttled_periods(tmp_path / "none") is None


def test_the_probe_sums_each_threads_new_wait_over_the_seconds_since_its_last_sample(tmp_path, monkeypatch):
    proc, sys_root = tmp_path / "proc", tmp_path / "sys"
    write(proc / "task" / "100" / "schedstat", "5000000000 1000000000 40\n")
    write(proc / "cgroup", "1:cpu:/node1\n")
    write(sys_root / "cpu" / "node1" / "cpu.cfs_quota_us", "1000\n")
    write(sys_root / "cpu" / "node1" / "cpu.cfs_period_us", "5000\n")
    write(sys_root / "cpu" / "node1" / "cpu.stat", "nr_periods 100\nnr_throttled 10\nthrottled_time 0\n")
    clock = iter([10.0, 12.0, 13.0])
    monkeypatch.setattr(probe_module.time, "monotonic", lambda: next(clock))
    probe = CpuWaitProbe(proc, sys_root)
    assert probe.quota_cores == pytest.approx(0.2)
    # thread 100 waited 0.6 s more; thread 101 is new and waited 0.4 s; 2 s passed: one core's worth waited half
    write(proc / "task" / "100" / "schedstat", "5500000000 1600000000 50\n")
    write(proc / "task" / "101" / "schedstat", "100000000 400000000 3\n")
    write(sys_root / "cpu" / "node1" / "cpu.stat", "nr_periods 500\nnr_throttled 310\nthrottled_time 0\n")
    waiting, throttled = probe.sample()
    assert waiting == pytest.approx(0.5) and throttled == pytest.approx(0.75)  # 300 of 400 periods
    # no period passed (the cgroup ran nothing): no share; thread 100 ended, 101 waited 0.1 s more in 1 s
    (proc / "task" / "100" / "schedstat").unlink()
    (proc / "task" / "100").rmdir()
    write(proc / "task" / "101" / "schedstat", "100000000 500000000 4\n")
    assert probe.sample() == (pytest.approx(0.1), None)


@linux_only
def test_threads_that_share_one_core_are_seen_waiting_for_it():
    """The process and a busy child pinned to one core: each is ready all the time and runs about half of it."""
    script = textwrap.dedent(
        """
        import os, subprocess, sys, time
        from workbench.cpu_probe import CpuWaitProbe
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            probe = CpuWaitProbe()
            until = time.monotonic() + 1.0
            while time.monotonic() < until:
                pass
            print(probe.sample()[0])
        finally:
            child.kill()
        """
    )
    waiting = float(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout)
    # alone it would wait about 0; sharing a core with another busy process, about half its time (0.5 measured)
    assert waiting > 0.2, waiting
    assert thread_run_delays(probe_module.Path("/proc/self/task"))  # this process's threads are readable


@linux_only
def test_the_recorders_heartbeat_writes_the_wait_for_a_core_and_its_meta_the_cores_allowed(tmp_path):
    path = create_run(tmp_path, "beats", ranks=1)
    with Recorder(path, rank=0, flush_interval_s=0.1, heartbeat_interval_s=0.2) as rec:
        # 1.5 s of beats every 0.2 s: a wait needs two readings, and a beat held up on a busy machine (seen once
        # in 0.7 s) still leaves two
        until = rec.now_ns() + 1_500_000_000
        while rec.now_ns() < until:
            pass
    run = RunData.load(path)
    waits = run.counters[run.counters["name"] == CPU_WAIT_PERCENT]["value"]
    assert len(waits) >= 2 and (waits >= 0).all()
    meta = run.rank_meta.iloc[0]
    assert meta["cpus_allowed"] == len(os.sched_getaffinity(0))
    assert "cpu_quota_cores" in run.rank_meta  # None here unless this process's cgroup has a quota
    table = cpu_wait_table(run.counters, run.rank_meta)
    assert list(table["rank"]) == [0] and table["cpu_cores"].iloc[0] > 0


# -- the table and the finding -----------------------------------------------------------------------------
def beats(rank: int, name: str, values: list[float], times_s: list[float] | None = None) -> pd.DataFrame:
    times_s = times_s or [1.0 + i for i in range(len(values))]
    return pd.DataFrame(
        {"rank": rank, "name": name, "time_ns": [int(t * 1e9) for t in times_s], "value": values, "host": "h"}
    )


def counters_of(*frames: pd.DataFrame) -> pd.DataFrame:
    return pd.concat(frames, ignore_index=True)


def test_the_table_weighs_each_beat_by_the_time_since_the_last_one():
    counters = counters_of(
        beats(0, CPU_PERCENT, [50, 50, 50, 50]),
        beats(0, CPU_WAIT_PERCENT, [50, 50, 50, 50]),
        beats(1, CPU_PERCENT, [100, 100, 100, 100]),
        beats(1, CPU_WAIT_PERCENT, [0, 0, 0, 0]),
        # beats 1 s and 2 s apart: the first counts as the median gap, 1.5 s; 1 s of a full core in 4.5 s
        beats(2, CPU_WAIT_PERCENT, [0, 100, 0], [0.0, 1.0, 3.0]),
        beats(3, CPU_PERCENT, [100, 100]),  # a recorder without the wait counter: left out
    )
    meta = pd.DataFrame({"rank": [0, 1], "cpu_quota_cores": [0.5, None], "cpus_allowed": [2, 2]})
    table = cpu_wait_table(counters, meta).set_index("rank")
    assert list(table.index) == [0, 1, 2]
    assert table.loc[0, "seconds"] == 4 and table.loc[0, "cpu_cores"] == 0.5 and table.loc[0, "waiting_cores"] == 0.5
    assert table.loc[0, "wait_share"] == 0.5 and table.loc[0, "quota_cores"] == 0.5
    assert table.loc[1, "wait_share"] == 0 and math.isnan(table.loc[1, "quota_cores"])
    assert table.loc[2, "seconds"] == 4.5 and table.loc[2, "waiting_cores"] == pytest.approx(1 / 4.5)
    assert math.isnan(table.loc[2, "wait_share"]) is False and table.loc[2, "wait_share"] == 1.0  # never ran
    assert cpu_wait_table(None).empty and cpu_wait_table(counters_of(beats(0, CPU_PERCENT, [5]))).empty


def test_ranks_that_waited_are_named_with_the_time_it_cost_and_what_held_them():
    contended = counters_of(
        beats(0, CPU_PERCENT, [50] * 4),
        beats(0, CPU_WAIT_PERCENT, [50] * 4),
        beats(1, CPU_PERCENT, [100] * 4),
        beats(1, CPU_WAIT_PERCENT, [0] * 4),
    )
    found = cpu_wait_finding(cpu_wait_table(contended), wall_s=10.0, hosts={0: "node1", 1: "node2"}).iloc[0]
    # rank 0 was ready 1 core's worth and ran half of it for 4 s: up to 2 s lost, a fifth of the wall time
    assert found["kind"] == "cpu_wait" and found["ranks"] == "0"
    assert found["seconds_lost"] == 2.0 and found["fraction_of_wall"] == 0.2
    assert "rank 0 (node1) waited for a core 50%" in found["text"] and "no CPU quota held them" in found["text"]

    throttled = counters_of(contended, beats(0, CPU_THROTTLED_PERCENT, [90] * 4))
    small = pd.DataFrame({"rank": [0], "cpu_quota_cores": [0.4], "cpus_allowed": [8]})
    text = cpu_wait_finding(cpu_wait_table(throttled, small), wall_s=10.0)["text"].iloc[0]
    assert "quota of 0.4 cores ran out in 90% of its periods" in text and "under one core" in text
    large = small.assign(cpu_quota_cores=4.0)
    text = cpu_wait_finding(cpu_wait_table(throttled, large), wall_s=10.0)["text"].iloc[0]
    assert "size TensorFlow's thread pools to it (4 threads)" in text

    # many threads waiting at once: the time lost is bounded by the share, not by the thread-seconds waited
    crowded = counters_of(beats(0, CPU_PERCENT, [100] * 4), beats(0, CPU_WAIT_PERCENT, [300] * 4))
    assert cpu_wait_finding(cpu_wait_table(crowded), wall_s=10.0)["seconds_lost"].iloc[0] == 3.0
    # ready a little and waiting a large share of it: bounded by what it waited, 0.1 core for 4 s
    seldom = counters_of(beats(0, CPU_PERCENT, [10] * 4), beats(0, CPU_WAIT_PERCENT, [10] * 4))
    assert cpu_wait_finding(cpu_wait_table(seldom), wall_s=10.0)["seconds_lost"].iloc[0] == pytest.approx(0.4)
    # under the share named, under min_fraction of the wall, or no wall time: nothing
    calm = counters_of(beats(0, CPU_PERCENT, [95] * 4), beats(0, CPU_WAIT_PERCENT, [5] * 4))
    assert cpu_wait_finding(cpu_wait_table(calm), wall_s=10.0).empty
    assert cpu_wait_finding(cpu_wait_table(seldom), wall_s=100.0).empty
    assert cpu_wait_finding(cpu_wait_table(contended), wall_s=None).empty


def test_analyse_run_names_the_wait_from_the_runs_counters():
    events = events_frame(
        [
            {
                "rank": r,
                "phase": "compute",
                "name": "train_step",
                "step": s,
                "start_ns": s * 10**9,
                "end_ns": (s + 1) * 10**9,
            }
            for r in (0, 1)
            for s in range(10)
        ]
    )
    counters = counters_of(
        *(beats(r, CPU_PERCENT, [50] * 10) for r in (0, 1)), *(beats(r, CPU_WAIT_PERCENT, [50] * 10) for r in (0, 1))
    )
    found = analyse_run(events, None, {"run_id": "r", "ranks": 2}, counters=counters).findings
    row = found[found["kind"] == "cpu_wait"].iloc[0]
    assert row["ranks"] == "0–1" and row["seconds_lost"] == 5.0
    assert "the median rank's 0.500 cores waiting beside 0.500 cores running" in row["text"]


def test_a_run_analysed_in_rank_groups_names_the_same_wait(tmp_path):
    from workbench.datasets.made_traces.job import write_made_run
    from workbench.rank_groups import analyse_split
    from workbench.store import StreamWriter, read_run_meta

    path = write_made_run(tmp_path, 6_000, 6, chunk_ranks=3, ranks_per_node=3)
    run_id = read_run_meta(path)["run_id"]
    first_ns = int(RunData.load(path).events["start_ns"].min())
    for rank in range(6):  # ranks 3-5 waited half their ready time, the others not at all
        wait = 50.0 if rank >= 3 else 0.0
        rows = [
            (name, first_ns + i * 10**9, value)
            for i in range(1, 6)
            for name, value in ((CPU_PERCENT, 50.0), (CPU_WAIT_PERCENT, wait))
        ]
        StreamWriter(path, "counters", rank).write_rows(
            rows, ("name", "time_ns", "value"), {"run_id": run_id, "rank": rank, "host": "h"}
        )
    run = RunData.load(path)
    whole = analyse_run(run.events, run.memory, run.meta, rank_meta=run.rank_meta, counters=run.counters).findings
    split = analyse_split(path, group_ranks=2).findings
    expected, merged = whole[whole["kind"] == "cpu_wait"], split[split["kind"] == "cpu_wait"]
    assert list(expected["ranks"]) == ["3–5"]
    columns = ["text", "seconds_lost", "ranks"]
    pd.testing.assert_frame_equal(merged[columns].reset_index(drop=True), expected[columns].reset_index(drop=True))


@linux_only
def test_the_probes_cost_benchmark_reads_every_thread():
    """``benchmarks/cpu_probe_cost.py --threads``: its quick form, no TensorFlow (numbers: docs/measurements.md)."""
    script = probe_module.Path(__file__).resolve().parents[2] / "benchmarks" / "cpu_probe_cost.py"
    command = [sys.executable, str(script), "--threads", "30", "--samples", "10", "--rounds", "2", "--json"]
    result = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    assert result["threads"] >= 31 and result["samples"] == 20
    assert result["probe_us"] > 0 and result["per_thread_us"] == pytest.approx(result["probe_us"] / result["threads"])
