"""Damaged traces, made from good ones, for every format ``workbench import`` reads (``workbench bench fuzz``).

A user's trace is cut off by a full disk, copied half-way, written by a tool version we never saw, or edited by
hand. Each case here starts from a good file (the shipped samples, files the bench makers write) and damages it
the way such files are damaged, knowing the format's structure: a JSON value of the wrong type, a key dropped or
written twice, numbers out of range, records shuffled or cut short, a raw control character in a name; in a
protobuf, a varint or a length field changed, a field dropped or repeated; a gzip stream cut or corrupted; bytes
flipped anywhere. Seeded, so a case is made again from its number.

``try_case`` imports the damaged file and analyses what was imported, and sorts the outcome into ``imported``
(a run, analysed, any damage said in the import's lines), ``refused`` (one line that names the file: the
importer's own error) or ``bad`` (anything else: another exception, a message of several lines or without the
file's name, a case past its time, the input folder written). The tests run a few cases of each format; the
benchmark runs thousands and reports outcomes by kind, the slowest case and the peak memory.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import resource
import shutil
import signal
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "data" / "traces"

#: The formats ``workbench import`` reads, as ``importer.sniff`` names them.
FORMATS: tuple[str, ...] = ("horovod_timeline", "kineto", "trace_json", "xplane")
#: A case taking longer than this is a hang (seconds; the seeds import in well under a second).
CASE_SECONDS = 30
#: Values of the wrong type or out of range, put where a JSON value was.
ODD_VALUES: tuple[Any, ...] = (
    None, True, -1, 0, 2**63, -(2**63) - 1, 10**30, 1e308, -1e308, 1.5, "", "x", "-1", "1e999", "\u0001",
    [], [1, "a"], {}, {"k": None},
)  # fmt: skip


@dataclass(frozen=True)
class Seed:
    """A good file to damage: its format, the name to write it under, its bytes (decompressed) and whether the
    format's files are gzipped."""

    format: str
    name: str
    data: bytes
    gzipped: bool = False


@dataclass(frozen=True)
class Case:
    """One damaged file: where it came from and what was done to it."""

    seed: Seed
    number: int
    data: bytes
    damage: str


@dataclass(frozen=True)
class Outcome:
    """``kind``: ``imported``, ``refused`` or ``bad``; ``text``: the one line, the import's lines, or what went
    wrong."""

    kind: str
    text: str
    seconds: float


# -- seeds -----------------------------------------------------------------------------------------------------------


def make_seeds(scratch: str | Path) -> list[Seed]:
    """Small good files of every format: the shipped samples (cut to a few hundred events where large) and the
    bench makers' files."""
    from workbench.datasets.made_traces.kineto import MadeKinetoStep, write_made_kineto
    from workbench.datasets.made_traces.xplane import write_made_xplane

    scratch = Path(scratch)
    seeds = [
        Seed(
            "horovod_timeline",
            "horovod_timeline.json",
            (TRACES / "smdebug_horovod_2020/horovod_timeline_small.json").read_bytes(),
        ),
        Seed(
            "trace_json",
            "host.trace.json.gz",
            gzip.decompress((TRACES / "smdebug_tfprofiler_8gpu/ip-172-31-19-241.trace.json.gz").read_bytes()),
            gzipped=True,
        ),
    ]
    seeds.append(Seed("trace_json", "gpu1.trace.json.gz", _made_trace_json(), gzipped=True))
    sample = json.loads(gzip.decompress((TRACES / "hta_trace_filter/sampled_rank-0.json.gz").read_bytes()))
    events = sample["traceEvents"]  # a few hundred of each kind: kernels, their launches, steps, operators
    kept = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep")]
    for category in ("kernel", "cuda_runtime", "gpu_memcpy", "cpu_op"):
        kept += [e for e in events if e.get("cat") == category][:120]
    sample["traceEvents"] = kept
    seeds.append(Seed("kineto", "rank-0.pt.trace.json.gz", json.dumps(sample).encode(), gzipped=True))
    made = write_made_kineto(scratch / "kineto", ranks=1, steps=3, step=MadeKinetoStep(kernels=4))[0]
    seeds.append(Seed("kineto", "rank-0.pt.trace.json", made.read_bytes()))
    xplane = write_made_xplane(scratch / "host.xplane.pb", host="node1", gpus=2, steps=3)
    seeds.append(Seed("xplane", "node1.xplane.pb", xplane.read_bytes()))
    return seeds


def _made_trace_json(gpus: int = 2, steps: int = 3) -> bytes:
    """A TensorBoard trace-viewer file with GPU work (the shipped one has host events only): per step a
    ``train_step`` marker on the host, a copy, kernels and an NCCL allreduce on each GPU's streams."""
    records: list[dict[str, Any]] = [
        {"ph": "M", "pid": 100, "name": "process_name", "args": {"name": "/host:CPU"}},
    ]
    for gpu in range(gpus):
        records.append({"ph": "M", "pid": gpu, "name": "process_name", "args": {"name": f"/device:GPU:{gpu}"}})
        for tid, lane in ((7, "Stream #7(Compute)"), (20, "Stream #20(Nccl)")):
            records.append({"ph": "M", "pid": gpu, "tid": tid, "name": "thread_name", "args": {"name": lane}})
    for step in range(steps):
        base = 1000.0 + step * 12000
        records.append({"ph": "X", "pid": 100, "tid": 1, "name": "train_step", "ts": base, "dur": 11000.0,
                        "args": {"step_num": str(step)}})  # fmt: skip
        for gpu in range(gpus):
            records.append({"ph": "X", "pid": gpu, "tid": 7, "name": "MemcpyH2D", "ts": base + 10, "dur": 200.0})
            for k in range(4):
                records.append({"ph": "X", "pid": gpu, "tid": 7, "name": "volta_sgemm_128x64_nn",
                                "ts": base + 300 + k * 1500, "dur": 1400.0 * (1 + gpu * 0.2)})  # fmt: skip
            records.append({"ph": "X", "pid": gpu, "tid": 20, "name": "ncclKernel_AllReduce_RING_LL_Sum_float",
                            "ts": base + 7000, "dur": 2500.0})  # fmt: skip
    return json.dumps({"displayTimeUnit": "ns", "traceEvents": records}).encode()


# -- JSON damage -----------------------------------------------------------------------------------------------------


def _json_paths(value: Any, path: tuple = (), depth: int = 0) -> Iterator[tuple]:
    """Every place in a JSON document (as a path of keys and indexes), the root first."""
    yield path
    if depth > 8:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _json_paths(item, (*path, key), depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _json_paths(item, (*path, index), depth + 1)


def _at(document: Any, path: tuple) -> Any:
    for step in path:
        document = document[step]
    return document


def _damage_json(document: Any, rng: random.Random) -> tuple[Any, str, list[tuple[str, str]]]:
    """One structural damage of a parsed JSON document; also keys to write twice (``json`` cannot)."""
    paths = list(_json_paths(document))
    path = paths[rng.randrange(len(paths))]
    where = "/".join(str(p) for p in path) or "the root"
    parent = _at(document, path[:-1]) if path else None
    choice = rng.randrange(7)
    duplicates: list[tuple[str, str]] = []
    if not path or choice == 0:
        odd = ODD_VALUES[rng.randrange(len(ODD_VALUES))]
        if not path:
            return odd, f"the document replaced by {odd!r}", duplicates
        parent[path[-1]] = odd
        return document, f"{where} set to {odd!r}", duplicates
    if choice == 1 and isinstance(parent, dict):
        del parent[path[-1]]
        return document, f"{where} dropped", duplicates
    if choice == 2 and isinstance(parent, dict):
        odd = ODD_VALUES[rng.randrange(len(ODD_VALUES))]
        duplicates.append((str(path[-1]), json.dumps(odd)))
        return document, f"{where} written twice, the second {odd!r}", duplicates
    target = _at(document, path)
    if choice == 3 and isinstance(target, (int, float)) and not isinstance(target, bool):
        scaled = rng.choice((-target, target * 10**12, target + 2**62, -(2**63), target / 3))
        parent[path[-1]] = scaled
        return document, f"{where} {target!r} -> {scaled!r}", duplicates
    if choice == 4 and isinstance(target, list) and len(target) > 1:
        rng.shuffle(target)
        return document, f"{where} shuffled", duplicates
    if choice == 5 and isinstance(target, list) and target:
        del target[rng.randrange(len(target)) :]
        return document, f"{where} cut to {len(target)} items", duplicates
    if isinstance(target, str):
        cut = rng.randrange(len(target) + 1)
        odd = rng.choice(("\u0001", "\n", "\t", "\u0000", '"', "\\", "\udcff"))
        parent[path[-1]] = target[:cut] + odd + target[cut:]
        return document, f"{where}: an odd character in the text", duplicates
    odd = ODD_VALUES[rng.randrange(len(ODD_VALUES))]
    parent[path[-1]] = odd
    return document, f"{where} set to {odd!r}", duplicates


def _json_text(document: Any, duplicates: list[tuple[str, str]], rng: random.Random) -> bytes:
    text = json.dumps(document, ensure_ascii=rng.random() < 0.5)
    for key, value in duplicates:  # the key again, right after its first occurrence's opening
        mark = json.dumps(key) + ": "
        at = text.find(mark)
        if at >= 0:
            text = text[:at] + f"{mark}{value}, " + text[at:]
    return text.encode("utf-8", "surrogatepass")


def _damage_bytes(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Damage that ignores the structure: a file cut short, bytes flipped, a stretch repeated or dropped."""
    if not data:
        return b"\x00", "an empty file given a zero byte"
    at = rng.randrange(len(data))
    choice = rng.randrange(5)
    if choice == 0:
        return data[:at], f"cut at byte {at} of {len(data)}"
    if choice == 1:
        flipped = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            flipped[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(flipped), f"bytes flipped from byte {at}"
    if choice == 2:
        length = rng.randint(1, 64)
        return data[:at] + data[at : at + length] * rng.randint(2, 50) + data[at + length :], f"bytes at {at} repeated"
    if choice == 3:
        return data[:at] + data[at + rng.randint(1, 64) :], f"bytes dropped at {at}"
    inserted = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    return data[:at] + inserted + data[at:], f"bytes inserted at {at}"


# -- protobuf damage -------------------------------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        bits, value = value & 0x7F, value >> 7
        out.append(bits | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("varint")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not byte & 0x80:
            return value, at


def _parse_message(data: bytes, depth: int = 0) -> list[list] | None:
    """A protobuf message as ``[number, wire type, value]`` fields (value: int, bytes, or a nested message where
    the bytes parse as one); None when the bytes are not a message."""
    fields: list[list] = []
    at = 0
    try:
        while at < len(data):
            key, at = _read_varint(data, at)
            number, wire = key >> 3, key & 7
            if number == 0:
                return None
            if wire == 0:
                value, at = _read_varint(data, at)
            elif wire == 1:
                value, at = int.from_bytes(data[at : at + 8], "little"), at + 8
            elif wire == 5:
                value, at = int.from_bytes(data[at : at + 4], "little"), at + 4
            elif wire == 2:
                length, at = _read_varint(data, at)
                if at + length > len(data):
                    return None
                raw = data[at : at + length]
                at += length
                nested = _parse_message(raw, depth + 1) if depth < 6 and raw else None
                value = nested if nested else raw
            else:
                return None
            fields.append([number, wire, value])
    except ValueError:
        return None
    return fields if at == len(data) else None


def _encode_message(fields: list[list]) -> bytes:
    out = bytearray()
    for number, wire, value in fields:
        out += _varint(number << 3 | wire)
        if wire == 0:
            out += _varint(value)
        elif wire == 1:
            out += (value & ((1 << 64) - 1)).to_bytes(8, "little")
        elif wire == 5:
            out += (value & ((1 << 32) - 1)).to_bytes(4, "little")
        else:
            payload = _encode_message(value) if isinstance(value, list) else value
            out += _varint(len(payload)) + payload
    return bytes(out)


def _all_fields(fields: list[list], path: tuple = ()) -> Iterator[tuple[list[list], int, tuple]]:
    for index, field in enumerate(fields):
        yield fields, index, (*path, field[0])
        if isinstance(field[2], list):
            yield from _all_fields(field[2], (*path, field[0]))


def _damage_protobuf(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """One field of the message changed, dropped or repeated; the message stays well-formed."""
    fields = _parse_message(data)
    if not fields:
        return _damage_bytes(data, rng)
    places = list(_all_fields(fields))
    owner, index, path = places[rng.randrange(len(places))]
    where = "field " + ".".join(str(p) for p in path)
    number, wire, value = owner[index]
    choice = rng.randrange(4)
    if choice == 0:
        del owner[index]
        return _encode_message(fields), f"{where} dropped"
    if choice == 1:
        owner.insert(index, [number, wire, value])
        return _encode_message(fields), f"{where} repeated"
    if wire in (0, 1, 5):
        odd = rng.choice((0, 1, 2**63 - 1, 2**64 - 1, 2**63, 2**32, value * 1000 + 1))
        owner[index][2] = odd
        return _encode_message(fields), f"{where} {value} -> {odd}"
    if isinstance(value, bytes) and value:
        text = bytearray(value)
        text[rng.randrange(len(text))] = rng.choice((0, 1, 0x80, 0xFF, ord('"')))
        owner[index][2] = bytes(text)
        return _encode_message(fields), f"{where}: a byte of its text changed"
    owner[index] = [number, 0, rng.choice((0, 2**63))]  # a message where a number is: the wrong wire type
    return _encode_message(fields), f"{where} made a number"


# -- cases -----------------------------------------------------------------------------------------------------------


def _compressed(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    packed = gzip.compress(data, mtime=0)
    choice = rng.randrange(6)
    if choice == 0:
        at = rng.randrange(10, len(packed))
        return packed[:at], f"; the gzip stream cut at byte {at} of {len(packed)}"
    if choice == 1:
        broken = bytearray(packed)
        at = rng.randrange(10, len(broken) - 8)
        broken[at] ^= 0xFF
        return bytes(broken), f"; the gzip stream's byte {at} corrupted"
    return packed, ""


def make_case(seed: Seed, number: int) -> Case:
    """Case ``number`` of ``seed``: the same bytes every time (seeded by the published study's name and the number)."""
    rng = random.Random(f"{seed.format}/{seed.name}/{number}")
    data = seed.data
    if seed.format == "xplane":
        damaged, damage = _damage_protobuf(data, rng) if rng.random() < 0.6 else _damage_bytes(data, rng)
    elif rng.random() < 0.7:
        try:
            document = json.loads(data)
        except ValueError:  # a Horovod timeline left unclosed, as a running job leaves it
            document = json.loads(data.rstrip().rstrip(b",") + b"]")
        document, damage, duplicates = _damage_json(document, rng)
        damaged = _json_text(document, duplicates, rng)
    else:
        damaged, damage = _damage_bytes(data, rng)
    if seed.gzipped:
        damaged, how = _compressed(damaged, rng)
        damage += how
    return Case(seed, number, damaged, damage)


@contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    def expired(_signal: int, _frame: Any) -> None:
        raise TimeoutError(f"no outcome after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _fingerprint(folder: Path) -> str:
    digest = hashlib.sha1()
    for path in sorted(folder.rglob("*")):
        digest.update(str(path.relative_to(folder)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _import_and_analyse(path: Path, runs: Path) -> list[str]:
    from workbench.analysis import analyse_run
    from workbench.importer import import_traces
    from workbench.store import RunData

    result = import_traces([path], out=runs)
    run = RunData.load(result.run_path)
    analysis = analyse_run(
        run.events, run.memory, run.meta, rank_meta=run.rank_meta, counters=run.counters, devices=run.devices
    )
    return [*result.lines, f"{len(analysis.findings)} findings"]


def try_case(case: Case, scratch: str | Path, *, seconds: int = CASE_SECONDS) -> Outcome:
    """Import the damaged file (alone in a folder) and analyse the run; the outcome sorted as the module says."""
    from workbench.formats.gpu_trace import TraceFormatError
    from workbench.formats.horovod_timeline import TimelineError
    from workbench.formats.xplane import XPlaneError
    from workbench.importer import TraceImportError

    ours = (TraceImportError, TraceFormatError, TimelineError, XPlaneError)
    folder = Path(tempfile.mkdtemp(prefix="case-", dir=scratch))
    try:
        path = folder / "input" / case.seed.name
        path.parent.mkdir()
        path.write_bytes(case.data)
        before = _fingerprint(path.parent)
        started = time.perf_counter()
        try:
            with _time_limit(seconds):
                lines = _import_and_analyse(path, folder / "runs")
            kind, text = "imported", " | ".join(lines)
        except ours as error:
            message = str(error)
            kind, text = "refused", message
            if "\n" in message or case.seed.name not in message:
                kind, text = "bad", f"{type(error).__name__} not one line naming the file: {message!r}"
        except Exception as error:  # what the fuzzing is for: anything else is a bug to mend
            where = traceback.extract_tb(error.__traceback__)[-1]
            kind = "bad"
            text = f"{type(error).__name__}: {error} (at {Path(where.filename).name}:{where.lineno})"
        seconds_taken = time.perf_counter() - started
        if _fingerprint(path.parent) != before:
            kind, text = "bad", f"the input folder was written; {text}"
        return Outcome(kind, text, seconds_taken)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def cases(seeds: list[Seed], per_seed: int, first: int = 0) -> Iterator[Case]:
    for seed in seeds:
        for number in range(first, first + per_seed):
            yield make_case(seed, number)


def run(per_seed: int = 500, first: int = 0, *, progress: Callable[[str], None] | None = None) -> dict:
    """``per_seed`` cases of every seed: outcomes by format and kind, the slowest case, the peak memory, and every
    ``bad`` case (to make again with ``make_case``)."""
    with tempfile.TemporaryDirectory(prefix="workbench-fuzz-") as scratch:
        seeds = make_seeds(scratch)
        counts: dict[str, Counter] = {f: Counter() for f in FORMATS}
        bad: list[dict] = []
        slowest = {"seconds": 0.0}
        started = time.perf_counter()
        for case in cases(seeds, per_seed, first):
            outcome = try_case(case, scratch)
            counts[case.seed.format][outcome.kind] += 1
            if outcome.seconds > slowest["seconds"]:
                slowest = {"seconds": round(outcome.seconds, 3), "seed": case.seed.name, "case": case.number,
                           "damage": case.damage, "outcome": outcome.kind}  # fmt: skip
            if outcome.kind == "bad":
                bad.append({"seed": case.seed.name, "case": case.number, "damage": case.damage, "text": outcome.text})
                if progress:
                    progress(f"bad: {case.seed.name} #{case.number} ({case.damage}): {outcome.text}")
        return {
            "cases": sum(sum(c.values()) for c in counts.values()),
            "per_seed": per_seed,
            "first": first,
            "seeds": [s.name for s in seeds],
            "outcomes": {f: dict(c) for f, c in counts.items()},
            "bad": bad,
            "slowest": slowest,
            "seconds": round(time.perf_counter() - started, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }


def format_result(result: dict) -> str:
    lines = [f"{result['cases']} damaged files ({result['per_seed']} of each of {len(result['seeds'])} seeds):"]
    for name, counts in result["outcomes"].items():
        lines.append(f"  {name}: " + ", ".join(f"{counts.get(k, 0)} {k}" for k in ("imported", "refused", "bad")))
    slow = result["slowest"]
    lines.append(f"  slowest: {slow['seconds']} s ({slow.get('seed')} #{slow.get('case')}: {slow.get('damage')})")
    lines.append(f"  peak memory {result['peak_rss_mb']:.0f} MB; {result['seconds']:.0f} s in all")
    lines += [f"  bad: {b['seed']} #{b['case']} ({b['damage']}): {b['text']}" for b in result["bad"][:20]]
    return "\n".join(lines)


def command(args: argparse.Namespace) -> int:
    """``workbench bench fuzz``: thousands of damaged traces; a bad outcome fails the command."""
    import sys

    from workbench.bench import print_result

    result = run(args.cases, args.first, progress=lambda line: print(line, file=sys.stderr))
    print_result(result, args, format_result)
    return 1 if result["bad"] else 0
