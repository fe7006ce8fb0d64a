"""``workbench import``: traces from elsewhere (Horovod timelines of every version, TF profiles) as runs.

Made files have a known truth (``bench.xplane``, ``bench.timeline``); the shipped real ones
(``data/traces``, from other people's jobs) are checked against what they hold.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench import analysis
from workbench.analysis.devices import device_step_table, union_ns
from workbench.datasets.made_traces.horovod_timeline import write_made_timeline
from workbench.datasets.made_traces.xplane import COPY_BYTES, MS, MadeGpuStep, write_made_xplane
from workbench.formats.gpu_trace import TraceFormatError, activity_kind, load_json_trace, read_xplane_activity
from workbench.formats.horovod_timeline import TimelineError, iter_horovod_timeline
from workbench.formats.trace_export import export_trace
from workbench.importer import TraceImportError, import_traces
from workbench.store import RunData, RunTail

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
STEP = MadeGpuStep(step_ns=16 * MS)  # the slow GPU's 12 ms of kernels + 2 ms allreduce fit each step


def _analysed(run_path: Path):
    run = RunData.load(run_path)
    return run, analysis.analyse_run(
        run.events, run.memory, run.meta, rank_meta=run.rank_meta, counters=run.counters, devices=run.devices
    )


def _listing(folder: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(folder)), p.stat().st_size) for p in folder.rglob("*"))


def test_union_counts_overlaps_once_per_group():
    group = np.array([0, 0, 0, 1, 1])
    start = np.array([0, 5, 20, 0, 100])
    end = np.array([10, 12, 25, 50, 100])
    assert union_ns(group, start, end, 2).tolist() == [17.0, 50.0]


def test_activity_kinds_from_names_and_lanes():
    assert activity_kind("MemcpyH2D") == "memcpy_h2d"
    assert activity_kind("Memcpy DtoH (Device -> Pageable)") == "memcpy_d2h"
    assert activity_kind("MemcpyP2P") == "memcpy_p2p"
    assert activity_kind("Memset (Device)") == "memset"
    assert activity_kind("ncclDevKernel_AllReduce_Sum_f16_RING_LL(ncclDevComm*)") == "collective"
    assert activity_kind("volta_sgemm_128x64_nn") == "kernel"
    assert activity_kind("copy", "Stream #7(MemcpyD2H)") == "memcpy_d2h"


def test_two_hosts_profiles_are_one_run_with_the_slow_gpu_and_the_hidden_share(tmp_path):
    session = tmp_path / "logs" / "plugins" / "profile" / "2026_11_28"
    session.mkdir(parents=True)
    write_made_xplane(session / "node1.xplane.pb", host="node1", gpus=2, steps=5, step=STEP, slow_gpus={1: 1.5})
    write_made_xplane(session / "node2.xplane.pb", host="node2", gpus=3, steps=5, step=STEP, unused_gpus=(2,))
    before = _listing(tmp_path / "logs")
    result = import_traces([tmp_path / "logs"], out=tmp_path / "runs")
    assert _listing(tmp_path / "logs") == before  # the user's folder is only read
    assert result.ranks == 4 and result.hosts == ["node1", "node2"]
    run, analysed = _analysed(result.run_path)
    assert run.meta["import"]["clocks"] == "aligned"
    assert run.meta["devices_idle"] == {"node2": ["GPU:2"]}
    gpus = analysed.devices.set_index("rank")
    assert gpus.loc[1, "device"] == "GPU:1" and gpus.loc[1, "host"] == "node1"
    # hand-computed: copy 0.2 ms, 20 kernels of 0.4 ms (0.6 on the slow GPU), allreduce 2 ms starting 1 ms
    # before the last kernel ends; steps of 16 ms
    normal_busy, slow_busy = (0.2 + 8 + 1) / 1000, (0.2 + 12 + 1) / 1000
    assert gpus.loc[0, "busy_s"] == pytest.approx(5 * normal_busy)
    assert gpus.loc[1, "busy_s"] == pytest.approx(5 * slow_busy)
    assert gpus.loc[2, "idle_s"] == pytest.approx(5 * (0.016 - normal_busy))
    assert gpus["communication_hidden_share"].tolist() == pytest.approx([0.5] * 4)
    assert gpus["steps"].tolist() == [5] * 4
    kinds = analysed.findings.set_index("kind")
    assert "rank 1 (node1 GPU:1)" in kinds.loc["lagging_gpu", "text"]
    assert kinds.loc["lagging_gpu", "seconds_lost"] == pytest.approx(5 * (slow_busy - normal_busy))
    assert "GPU:2" in kinds.loc["unused_gpu", "text"]
    assert kinds.loc["exposed_communication", "seconds_lost"] == pytest.approx(5 * 0.001)
    steps = analysed.steps.set_index("rank")
    assert steps["steps"].tolist() == [5] * 4
    # the per-GPU spans cover each step whole: compute + communication + transfer + idle = the step
    per_rank = analysed.breakdown[analysed.breakdown["rank"] == 0].set_index("phase")["seconds"]
    assert per_rank[["compute", "communication", "transfer"]].sum() == pytest.approx(5 * normal_busy)
    copies = run.devices[run.devices["kind"] == "memcpy_h2d"]
    assert len(copies) == 4 * 5 and (copies["bytes"] == COPY_BYTES).all()  # from each copy's memcpy_details
    exported = export_trace(result.run_path, tmp_path / "trace.json.gz")
    assert exported.ranks == 4 and exported.hosts == 2


def test_the_real_8_gpu_xplane_names_its_busy_and_unused_gpus(tmp_path):
    before = _listing(TRACES / "tfprofiler_gpu_multi_worker")
    result = import_traces([TRACES / "tfprofiler_gpu_multi_worker"], out=tmp_path)
    assert _listing(TRACES / "tfprofiler_gpu_multi_worker") == before  # no .SSTABLE or anything beside it
    run, analysed = _analysed(result.run_path)
    assert analysed.devices["device"].tolist() == ["GPU:1", "GPU:4", "GPU:6"]
    kernels = run.devices[run.devices["kind"] == "kernel"].groupby("device", observed=True).size()
    assert kernels.to_dict() == {"GPU:4": 665, "GPU:6": 665}
    assert run.meta["import"]["clocks"] == "unaligned"  # the demo's timestamps are not since the epoch
    unused = analysed.findings.set_index("kind").loc["unused_gpu", "text"]
    assert "5 GPUs" in unused and "GPU:0, GPU:2, GPU:3, GPU:5, GPU:7" in unused


def test_a_2019_timeline_without_start_record_unclosed_and_gzipped(tmp_path):
    path = write_made_timeline(tmp_path / "t.json", 0.05, ranks=4, layout="2019", origin_us=1_410_488_741_507)
    assert not path.read_text().rstrip().endswith("]")
    packed = tmp_path / "timeline.json.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    for source in (path, packed):
        info: dict = {}
        events = pd.concat(list(iter_horovod_timeline(source, info=info)))
        assert info["has_start_record"] is False and info["epoch_aligned"] is False
        assert info["ranks"] == [0, 1, 2, 3] and info["cycle_marks"] == 10
        negotiations = events[events["name"] == "NEGOTIATE_ALLREDUCE"].groupby("rank").size()
        assert negotiations.to_dict() == {0: 60, 1: 60, 2: 60, 3: 60}
        assert int(events["start_ns"].min()) >= 1_410_488_741_507_000  # the steady clock's own µs, kept
    result = import_traces([packed], out=tmp_path / "runs")
    assert result.ranks == 4
    assert any("no start record" in line and "clock: steady, no epoch" in line for line in result.lines)


def test_rotated_fragments_pair_an_activity_across_files(tmp_path):
    origin = 1_700_000_000_000_000
    start = {"name": "process_name", "ph": "M", "pid": 0, "args": {"start_time_since_epoch_in_micros": origin}}
    head = "[\n" + json.dumps(start) + ",\n"
    first = tmp_path / "timeline_0.json"
    second = tmp_path / "timeline_1.json"
    first.write_text(
        head + '{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "grad"}},\n'
        '{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 10, "pid": 1},\n'
        '{"ph": "X", "name": "0", "ts": 11, "pid": 1, "dur": 0},\n'
        '{"ph": "X", "name": "1", "ts": 15, "pid": 1, "dur": 0}\n]\n'
    )
    ended = '{"ph": "E", "ts": 20, "pid": 1},\n{"ph": "B", "name": "ALLREDUCE", "ts": 21, "pid": 1},\n'
    second.write_text(head + ended)  # the job stopped mid-file: never closed
    info: dict = {}
    events = pd.concat(list(iter_horovod_timeline([first, second], info=info)))
    negotiation = events[events["name"] == "NEGOTIATE_ALLREDUCE"].sort_values("rank")
    assert negotiation["start_ns"].tolist() == [(origin + 11) * 1000, (origin + 15) * 1000]
    assert negotiation["end_ns"].tolist() == [(origin + 20) * 1000] * 2
    assert info["open_activities"] == 1  # the ALLREDUCE the second fragment began


def test_the_real_smdebug_fragments_say_why_they_give_no_span(tmp_path):
    fragments = sorted((TRACES / "smdebug_horovod_2020").glob("1593*_horovod_timeline.json"))
    result = import_traces(fragments, out=tmp_path)
    assert result.events == 0
    line = next(line for line in result.lines if "Horovod timeline" in line)
    assert "2 fragments" in line and "4 collectives began and never ended" in line
    assert "a world of at least 8" in line
    _run, analysed = _analysed(result.run_path)  # analysis never raises on it
    assert len(analysed.findings)


def test_bad_input_is_one_line_naming_the_file(tmp_path):
    empty = tmp_path / "empty.xplane.pb"
    empty.write_bytes(b"")
    with pytest.raises(TraceImportError, match=r"empty\.xplane\.pb is empty"):
        import_traces([empty], out=tmp_path / "runs")
    wrong = tmp_path / "notes.xplane.pb"
    wrong.write_text("hello")
    with pytest.raises(TraceImportError, match="not an XPlane profile"):
        import_traces([wrong], out=tmp_path / "runs")
    text = tmp_path / "readme.json"
    text.write_text('["just", "words"]')
    with pytest.raises(TimelineError, match="not a Horovod timeline"):
        list(iter_horovod_timeline(text))
    bomb = tmp_path / "big.trace.json.gz"
    bomb.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * 3_000_000 + b"]}"))
    with pytest.raises(TraceFormatError, match="expands past"):
        load_json_trace(bomb, limit=1_000_000)


def test_a_truncated_xplane_keeps_the_planes_before_the_damage(tmp_path):
    whole = write_made_xplane(tmp_path / "whole.xplane.pb", host="node1", gpus=3, steps=4)
    cut = tmp_path / "cut.xplane.pb"
    data = whole.read_bytes()
    cut.write_bytes(data[: int(len(data) * 0.8)])
    trace = read_xplane_activity(cut)
    assert trace.notes and "damaged part-way" in trace.notes[0]
    complete = read_xplane_activity(whole)
    assert 0 < len(trace.activity) < len(complete.activity)
    assert set(trace.activity["device"]) < set(complete.activity["device"])


def test_cli_import_then_analyse(tmp_path):
    session = tmp_path / "plugins" / "profile" / "s"
    session.mkdir(parents=True)
    write_made_xplane(session / "gpu1.xplane.pb", host="gpu1", gpus=2, steps=3)
    done = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "import", str(tmp_path / "plugins"), "--out", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    run_path = Path(done.stdout.split("run: ")[1].split(" (")[0])
    assert "2 ranks on 1 host(s) (gpu1)" in done.stdout
    shown = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "analyse", str(run_path), "--json"], capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    assert [row["device"] for row in json.loads(shown.stdout)["devices"]] == ["GPU:0", "GPU:1"]
    bad = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "import", str(tmp_path / "missing")], capture_output=True, text=True
    )
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1


def test_device_steps_without_markers_cover_the_whole_profile():
    activity = pd.DataFrame(
        {
            "rank": [0, 0, 1],
            "host": ["h"] * 3,
            "device": ["GPU:0", "GPU:0", "GPU:1"],
            "stream": ["s"] * 3,
            "kind": ["kernel", "collective", "kernel"],
            "name": ["k", "nccl", "k"],
            "step": [-1] * 3,
            "start_ns": [0, 50, 0],
            "end_ns": [100, 150, 400],
            "bytes": [-1] * 3,
        }
    )
    table = device_step_table(activity).set_index("rank")
    assert table["wall_s"].tolist() == [400e-9, 400e-9]
    assert table.loc[0, "busy_s"] == pytest.approx(150e-9)
    assert table.loc[0, "overlapped_s"] == pytest.approx(50e-9)
    assert table.loc[0, "exposed_communication_s"] == pytest.approx(50e-9)


def test_a_tf1_timeline_counts_stream_kernels_not_the_ops_that_launched_them(tmp_path):
    """TF1's client timeline (Chrome-trace JSON): the GPU's per-stream processes are its activity."""
    names = {
        1: "/job:localhost/replica:0/task:0/device:GPU:0 Compute",
        2: "/device:GPU:0/stream:all Compute",
        3: "/device:GPU:0/stream:14 Compute",
        4: "/device:GPU:0/memcpy Compute",
        5: "/job:localhost/replica:0/task:0/device:CPU:0 Compute",
    }
    records = [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}} for pid, name in names.items()]
    records += [
        {"ph": "X", "pid": 1, "tid": 0, "ts": 0, "dur": 50, "name": "MatMul", "args": {"op": "MatMul"}},
        {"ph": "X", "pid": 2, "tid": 0, "ts": 10, "dur": 30, "name": "MatMul", "args": {}},
        {"ph": "X", "pid": 3, "tid": 0, "ts": 10, "dur": 30, "name": "volta_sgemm_128x64_nn", "args": {}},
        {"ph": "X", "pid": 4, "tid": 0, "ts": 0, "dur": 8, "name": "MEMCPYHtoD", "args": {}},
    ]
    path = tmp_path / "timeline.json"
    path.write_text(json.dumps({"traceEvents": records}))
    result = import_traces([path], out=tmp_path / "runs")
    run, analysed = _analysed(result.run_path)
    assert result.ranks == 1 and sorted(run.devices["kind"].astype(str)) == ["kernel", "memcpy_h2d"]
    assert analysed.devices.loc[0, "busy_s"] == pytest.approx(38e-6)  # 0-8 µs copy, 10-40 µs kernel


def test_a_timeline_damaged_part_way_keeps_every_sound_record(tmp_path):
    whole = write_made_timeline(tmp_path / "t.json", 0.3, ranks=2, origin_us=1_700_000_000_000_000)
    text = whole.read_text()
    cut = text.index("\n{", len(text) // 2) + 1
    damaged = tmp_path / "damaged.json"
    # a record that is not JSON and one whose time is text: left out, the records after them read
    damaged.write_text(text[:cut] + '{"ph": "B", "name": },\n{"ph": "E", "ts": "soon", "pid": 1},\n' + text[cut:])
    result = import_traces([damaged], out=tmp_path / "runs")
    line = next(line for line in result.lines if "Horovod timeline" in line)
    assert "2 damaged records left out" in line and "stopped early" not in line
    complete = sum(len(batch) for batch in iter_horovod_timeline(whole))
    assert result.events == complete


def test_a_timeline_and_profiles_of_one_job_are_one_run_on_one_clock(tmp_path):
    session = tmp_path / "job" / "plugins" / "profile" / "s"
    session.mkdir(parents=True)
    epoch_ns = 1_700_000_000_000_000_000
    for host in ("node1", "node2"):
        write_made_xplane(session / f"{host}.xplane.pb", host=host, gpus=2, steps=3, epoch_ns=epoch_ns)
    timeline = write_made_timeline(tmp_path / "job" / "timeline.json", 0.02, ranks=4, origin_us=epoch_ns // 1000)
    result = import_traces([tmp_path / "job"], out=tmp_path / "runs")
    run = RunData.load(result.run_path)
    assert result.ranks == 4 and run.meta["import"]["clocks"] == "aligned"
    collectives = run.events[run.events["phase"] == "in_flight"]
    negotiations = collectives[collectives["name"] == "NEGOTIATE_ALLREDUCE"]
    assert dict(zip(negotiations["rank"], negotiations["host"])) == {0: "node1", 1: "node1", 2: "node2", 3: "node2"}
    # both sources on one clock: the timeline's first record within the profiles' first second
    gpu_start = int(run.devices["start_ns"].min())
    assert abs(int(negotiations["start_ns"].min()) - gpu_start) < 1_000_000_000
    assert timeline.exists()
    if importlib.util.find_spec("ipywidgets") and importlib.util.find_spec("anywidget"):  # the notebook extra
        from workbench.widgets import Dashboard

        Dashboard(RunTail(result.run_path)).update()  # the dashboard replays an imported run
