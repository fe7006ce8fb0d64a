"""A trace format is one module and one ``register_reader``: a format made here, in the test alone, imports.

The format is a small CSV of GPU activity (``gpu,start_us,end_us,name`` rows, one file per host) that nothing in
the package knows: registered by the fixture and unregistered after, it is found in a folder, sniffed, read and
analysed like the built-in ones, and a file of no registered format is still refused with the one line.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

import pytest

from workbench import analysis
from workbench.cli import main
from workbench.formats.gpu_trace import DeviceTrace, TraceFormatError, activity_frame, activity_kind
from workbench.formats.registry import FileStart, TraceReader, readers, register_reader, unregister_reader
from workbench.importer import TraceImportError, import_traces, sniff
from workbench.store import RunData

HEADER = "gpu,start_us,end_us,name"
SUFFIX = ".gpu.csv"
ROWS = [  # two GPUs: GPU 0 busy 0-30 µs and 40-50 µs, GPU 1 busy 5-25 µs
    (0, 0, 20, "volta_sgemm_128x64_nn"),
    (0, 20, 30, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
    (0, 40, 50, "MemcpyH2D"),
    (1, 5, 25, "volta_sgemm_128x64_nn"),
]


def read_gpu_csv(path: Path) -> DeviceTrace:
    """The test format's reader: each row one activity on ``GPU:<gpu>``, one stream, µs after the profile's start."""
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    try:
        start = [int(row["start_us"]) * 1000 for row in rows]
        end = [int(row["end_us"]) * 1000 for row in rows]
    except (KeyError, TypeError, ValueError) as error:
        raise TraceFormatError(f"{path} has a row that is not gpu,start_us,end_us,name ({error})") from None
    devices = [f"GPU:{row['gpu']}" for row in rows]
    frame = activity_frame(
        {
            "host": path.name.removesuffix(SUFFIX),
            "device": devices,
            "stream": ["stream 7"] * len(rows),
            "kind": [activity_kind(row["name"]) for row in rows],
            "name": [row["name"] for row in rows],
            "start_ns": start,
            "end_ns": end,
        }
    )
    return DeviceTrace(path, "gpu_csv", path.name.removesuffix(SUFFIX), frame, sorted(set(devices)), False)


def _is_gpu_csv(file: FileStart) -> bool:
    return file.name.endswith(SUFFIX) and file.head is not None and file.head.startswith(HEADER.encode())


@pytest.fixture
def gpu_csv() -> Iterator[TraceReader]:
    """The test format, registered for the test only."""
    reader = register_reader(TraceReader("gpu_csv", (f"*{SUFFIX}",), _is_gpu_csv, read=read_gpu_csv))
    yield reader
    unregister_reader(reader.name)


def _write(folder: Path, host: str = "node1") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{host}{SUFFIX}"
    path.write_text("\n".join([HEADER, *(",".join(map(str, row)) for row in ROWS)]) + "\n")
    return path


def test_the_built_in_formats_are_registered_in_sniffing_order():
    names = [reader.name for reader in readers()]
    assert set(names) >= {"xplane", "old_trace", "horovod_timeline", "kineto", "trace_json"}
    assert names.index("kineto") < names.index("trace_json")  # the narrower JSON-object test is asked first


def test_a_format_registered_by_a_test_imports_as_a_run_whose_analysis_shows_its_gpus(gpu_csv, tmp_path):
    path = _write(tmp_path / "logs")
    assert sniff(path) == "gpu_csv"
    result = import_traces([tmp_path / "logs"], out=tmp_path / "runs")
    assert result.ranks == 2 and result.hosts == ["node1"] and result.device_activities == len(ROWS)
    assert any(line.startswith(f"{path.name}: gpu_csv, host node1: 4 GPU activities") for line in result.lines)
    run = RunData.load(result.run_path)
    analysed = analysis.analyse_run(
        run.events, run.memory, run.meta, rank_meta=run.rank_meta, counters=run.counters, devices=run.devices
    )
    gpus = analysed.devices.set_index("rank")
    assert gpus["device"].tolist() == ["GPU:0", "GPU:1"]
    assert gpus.loc[0, "busy_s"] == pytest.approx(40e-6) and gpus.loc[1, "busy_s"] == pytest.approx(20e-6)
    assert sorted(run.devices["kind"].astype(str)) == ["collective", "kernel", "kernel", "memcpy_h2d"]
    assert run.meta["import"]["sources"][0]["format"] == "gpu_csv"


def test_the_cli_imports_the_registered_format(gpu_csv, tmp_path, capsys):
    _write(tmp_path / "logs", host="gpu7")
    assert main(["import", str(tmp_path / "logs"), "--out", str(tmp_path / "runs")]) == 0
    assert "2 ranks on 1 host(s) (gpu7)" in capsys.readouterr().out


def test_a_damaged_file_of_the_format_is_its_one_line(gpu_csv, tmp_path):
    path = _write(tmp_path / "logs")
    path.write_text(HEADER + "\n0,zero,20,k\n")
    with pytest.raises(TraceImportError, match=r"node1\.gpu\.csv has a row that is not") as raised:
        import_traces([path], out=tmp_path / "runs")
    assert len(str(raised.value).splitlines()) == 1
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # no half-made run


def test_an_unknown_file_is_still_refused_with_the_one_line(gpu_csv, tmp_path):
    other = tmp_path / "notes.csv"
    other.write_text(HEADER + "\n0,0,20,k\n")  # the format's rows, not its name: no format claims it
    with pytest.raises(TraceImportError, match=r"notes\.csv is not a trace this reads \(not an XPlane"):
        import_traces([other], out=tmp_path / "runs")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceImportError, match="holds no trace this reads"):
        import_traces([tmp_path / "empty"], out=tmp_path / "runs")


def test_once_unregistered_the_format_is_unknown_again(tmp_path):
    path = _write(tmp_path / "logs")
    assert sniff(path) == "unknown"
    with pytest.raises(TraceImportError, match="holds no trace this reads"):
        import_traces([tmp_path / "logs"], out=tmp_path / "runs")
