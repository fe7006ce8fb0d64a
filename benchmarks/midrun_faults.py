"""Faults in the middle of a run on the miniature cluster: a link down, a link slowed, the run folder full.

    sudo .venv/bin/python benchmarks/midrun_faults.py --json     # about 3 min, root (it builds its own cluster)

4 nodes of 0.4 core and a 1 Gbit/s link, a rank each, train data-parallel steps (busy compute, then an
allreduce of 1 MB) with the recorder on, watched as a notebook's run is (``Cluster.watch``). Once every rank
records and the links have run a few seconds at their speed, one fault: node3's link down for 12 s
(``set_link``), node3's link at 100 Mbit/s for 15 s (``shape``), or the run folder (a 64 MB tmpfs) filled by a
file for 8 s. For each: how soon the watch named it (the first network alert in ``run.json``, or the watch's
line that the disk is full), what the run's analysis says afterwards, and whether every step of every rank
was recorded. Also what the heartbeat's reading of a rank's TCP connections costs (``LinkProbe.sample``,
this process's CPU per call) with 0-64 connections open. ``--json`` prints one object
(``benchmarks/results/midrun-faults.json``).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import cloudpickle
from cluster_options import run_measurement

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the engines cannot import this script

NODES, CPUS_PER_NODE, LINK = 4, 0.4, "1gbit"
STEPS = 1200
DOWN_S, SLOWED_S, FULL_S = 12.0, 15.0, 8.0
SLOWED_LINK = "100mbit"
PROBE_CONNECTIONS = (0, 16, 64)
#: How each fault's alert begins (the disk's: the watch's log line)
NAMED = {"link_down": "node3's link", "slowed_link": "node3's link slowed", "disk_full": "the run folder's disk"}
PROBE_CALLS = 200


def train_steps(run_path: str, steps: int, tensor_mb: float, compute_s: float) -> dict[str, Any]:
    """On each rank: ``steps`` of busy compute then an allreduce, each recorded as a step."""
    import time

    import numpy as np
    from mpi4py import MPI

    from workbench.recorder import Recorder

    comm = MPI.COMM_WORLD
    gradient = np.ones(int(tensor_mb * 2**20 / 4), dtype=np.float32)
    summed = np.empty_like(gradient)
    with Recorder(run_path, flush_interval_s=0.1) as recorder:
        recorder.align_clocks(comm)
        for step in range(steps):
            recorder.step = step
            with recorder.phase("compute", "train_step", step=step):
                deadline = time.thread_time() + compute_s
                while time.thread_time() < deadline:
                    pass
                with recorder.phase("communication", "allreduce", step=step, nbytes=gradient.nbytes):
                    comm.Allreduce(gradient, summed, op=MPI.SUM)
    return {"rank": comm.Get_rank()}


class _Said(logging.Handler):
    """The watch's log lines, kept with when they came."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((time.monotonic(), record.getMessage()))


def one_fault(mini: Any, out: Path, kind: str) -> dict[str, Any]:
    """A run with one fault in its middle: when it was named, what the analysis says, what was recorded."""
    from workbench.api import Run
    from workbench.store import RunData, create_run, read_run_meta

    said = _Said()
    logging.getLogger("workbench.cluster").addHandler(said)
    try:
        with mini.cluster(NODES) as cluster:
            run_path = create_run(out, name=f"midrun-{kind}", ranks=NODES)
            watch = cluster.watch(run_path, stall_after_s=3)
            pending = cluster.client[sorted(cluster.client.ids)].apply_async(
                train_steps, str(run_path), STEPS, 1.0, 0.005
            )
            outcome: dict[str, Any] = {}

            def follow() -> None:
                try:
                    while not pending.ready():
                        watch.check()
                        time.sleep(0.5)
                    outcome["results"] = pending.get()
                except Exception as error:  # in the result: a bad outcome, not a crash of the benchmark
                    outcome["error"] = f"{type(error).__name__}: {error}"

            follower = threading.Thread(target=follow, daemon=True)
            follower.start()
            while len(RunData.load(run_path).events.groupby("rank")) < NODES:
                time.sleep(0.2)
            time.sleep(4)
            hold = {"link_down": DOWN_S, "slowed_link": SLOWED_S, "disk_full": FULL_S}[kind]
            injected = time.monotonic()
            filler = None
            if kind == "link_down":
                mini.set_link("node3", up=False)
            elif kind == "slowed_link":
                mini.shape("node3", SLOWED_LINK)
            else:
                filler = fill(out)
            detected = None
            while time.monotonic() - injected < hold:
                if detected is None:
                    alerts = (read_run_meta(run_path).get("network") or {}).get("alerts", [])
                    named = [line for when, line in said.lines if when >= injected and "disk is full" in line]
                    named += [alert for alert in alerts if alert.startswith(NAMED[kind])]
                    if named:
                        detected = {"seconds": time.monotonic() - injected, "said": named[0]}
                time.sleep(0.1)
            if kind == "link_down":
                mini.set_link("node3", up=True)
            elif kind == "slowed_link":
                mini.shape("node3", LINK)
            elif filler is not None:
                filler.unlink()
            follower.join(300)
    finally:
        logging.getLogger("workbench.cluster").removeHandler(said)
    events = RunData.load(run_path).events
    steps = events[events["name"] == "train_step"]
    complete = all(sorted(group["step"]) == list(range(STEPS)) for _rank, group in steps.groupby("rank"))
    finding_kind = {"link_down": "link_down", "slowed_link": "slowed_link", "disk_full": "records_held"}[kind]
    findings = Run.load(run_path).analyse().findings
    found = findings[findings["kind"] == finding_kind]
    return {
        "fault": kind,
        "held_s": hold,
        "detected": detected,
        "finished": "results" in outcome,
        "error": outcome.get("error"),
        "every_step_recorded": bool(complete and steps["rank"].nunique() == NODES),
        "finding": found.iloc[0]["text"] if len(found) else None,
        "finding_seconds_lost": lost if len(found) and (lost := float(found.iloc[0]["seconds_lost"])) == lost else None,
    }


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk`` with one file (a little less each try while the ranks write)."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as handle:
        stat = os.statvfs(disk)
        wanted = stat.f_bavail * stat.f_frsize
        while wanted > 0:
            try:
                os.posix_fallocate(handle.fileno(), 0, wanted)
                break
            except OSError:
                wanted -= 1 << 20
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError:
            pass
    return filler


def probe_cost() -> dict[str, Any]:
    """CPU per ``LinkProbe.sample()`` with N TCP connections open in the process (to this machine's address)."""
    from workbench.net_probe import LinkProbe, host_addresses

    address = next((a for a in host_addresses() if "." in a), "127.0.0.1")
    costs = {}
    for count in PROBE_CONNECTIONS:
        server = socket.create_server((address, 0), backlog=max(1, count))
        pairs = []
        for _ in range(count):
            client = socket.create_connection(server.getsockname())
            pairs.append((client, server.accept()[0]))
        probe = LinkProbe()
        started = time.thread_time()
        for _ in range(PROBE_CALLS):
            probe.sample()
        costs[str(count)] = (time.thread_time() - started) / PROBE_CALLS
        for client, accepted in pairs:
            client.close()
            accepted.close()
        server.close()
    return {"calls": PROBE_CALLS, "cpu_s_per_sample": costs}


def measure() -> dict[str, Any]:
    from workbench import minicluster

    minicluster.check_host_for_own_cluster()
    faults = []
    with minicluster.minicluster(nodes=NODES, cpus_per_node=CPUS_PER_NODE, link=LINK) as mini:
        for kind in ("link_down", "slowed_link", "disk_full"):
            print(f"{kind} ...", file=sys.stderr, flush=True)
            with tempfile.TemporaryDirectory(prefix="midrun-") as scratch:
                disk = Path(scratch) / "disk"
                disk.mkdir()
                if kind == "disk_full" and os.system(f"mount -t tmpfs -o size=64m tmpfs {disk}") != 0:
                    raise minicluster.MiniClusterError("cannot mount a tmpfs for the run folder (root needed)")
                try:
                    faults.append(one_fault(mini, disk, kind))
                finally:
                    if kind == "disk_full":
                        os.system(f"umount -l {disk}")
    return {
        "nodes": NODES,
        "cpus_per_node": CPUS_PER_NODE,
        "link": LINK,
        "steps": STEPS,
        "faults": faults,
        "probe": probe_cost(),
    }


def text(result: dict[str, Any]) -> str:
    lines = [f"{result['nodes']} nodes of {result['cpus_per_node']:g} core, {result['link']} links"]
    for fault in result["faults"]:
        detected = fault["detected"]
        when = f"named after {detected['seconds']:.1f} s" if detected else "NOT named while it lasted"
        lines.append(
            f"{fault['fault']} for {fault['held_s']:g} s: {when}; finished {fault['finished']}, every step recorded"
            f" {fault['every_step_recorded']}; {fault['finding']}"
        )
    costs = result["probe"]["cpu_s_per_sample"]
    lines.append("probe: " + ", ".join(f"{n} connections {c * 1e6:.0f} µs" for n, c in costs.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    return run_measurement("benchmarks/midrun_faults.py", measure, text, as_json=args.json)


if __name__ == "__main__":
    sys.exit(main())
