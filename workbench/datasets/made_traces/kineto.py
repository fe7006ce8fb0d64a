"""Made PyTorch profiler (Kineto) traces with a known truth, one file per rank: for tests and ``benchmarks/peers.py``.

Per step: a ``ProfilerStep#N`` annotation on the CPU, a ``cudaLaunchKernel`` per GPU activity (its
``correlation`` ties it to what it launched), a host-to-device copy, ``kernels`` compute kernels back to back
on stream 7 (``kernel_gap_us`` apart), and an NCCL allreduce on stream 20 that starts ``overlap_us`` before the
last kernel ends. Every time is chosen, so the busy, idle, compute and overlap shares, and the GPU's waits for
the host (``launch_lead_us``), are known exactly.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

KERNEL = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int, float*)"
ALLREDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
COPY = "Memcpy HtoD (Pageable -> Device)"


@dataclass(frozen=True)
class MadeKinetoStep:
    """One step's layout, µs after the step's start."""

    kernels: int = 20
    kernel_us: int = 400
    copy_us: int = 200
    allreduce_us: int = 2000
    overlap_us: int = 1000
    step_us: int = 12000
    #: idle between compute kernels
    kernel_gap_us: int = 0
    #: None: every launch call early in the step (the GPU never waits for the host); else every second activity's
    #: call starts this long before the activity (a gap longer than it is the GPU waiting for the host)
    launch_lead_us: int | None = None

    def busy_us(self, slow: float = 1.0) -> float:
        return self.copy_us + self.kernels * self.kernel_us * slow + self.allreduce_us - self.overlap_us


def write_made_kineto(
    folder: str | Path,
    *,
    ranks: int = 2,
    steps: int = 10,
    step: MadeKinetoStep = MadeKinetoStep(),
    slow_ranks: dict[int, float] | None = None,
    base_us: int = 1_700_000_000_000_000,
    compress: bool = False,
    layout: str = "line",
) -> list[Path]:
    """``ranks`` files ``rank-<r>.pt.trace.json[.gz]`` in ``folder``; a rank in ``slow_ranks`` computes slower.

    ``layout``: ``"line"`` (an event a line, as HTA's trace filter writes) or ``"libkineto"`` (a key a line, as
    the PyTorch profiler itself writes)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(ranks):
        slow = (slow_ranks or {}).get(rank, 1.0)
        kernel_us = step.kernel_us * slow
        records = []
        correlation = 1_000_000  # ids run high in real profiles (HTA 0.5 fails on small ones: int16 columns)
        for k in range(steps):
            t0 = base_us + k * step.step_us
            records.append(
                {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 100, "tid": 100,
                 "ts": t0, "dur": step.step_us - 1, "args": {}}
            )  # fmt: skip
            gpu = [(COPY, "gpu_memcpy", 7, t0, step.copy_us)]
            pitch = kernel_us + step.kernel_gap_us
            gpu += [(KERNEL, "kernel", 7, t0 + step.copy_us + i * pitch, kernel_us) for i in range(step.kernels)]
            compute_end = t0 + step.copy_us + step.kernels * pitch - step.kernel_gap_us
            gpu.append((ALLREDUCE, "kernel", 20, compute_end - step.overlap_us, step.allreduce_us))
            for index, (name, category, stream, start, duration) in enumerate(gpu):
                correlation += 1
                late = step.launch_lead_us is not None and index % 2 == 1
                launch = start - step.launch_lead_us if late else t0 + 1 + index
                records.append(
                    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100,
                     "ts": launch, "dur": 1, "args": {"correlation": correlation}}
                )  # fmt: skip
                records.append(
                    {"ph": "X", "cat": category, "name": name, "pid": 0, "tid": stream, "ts": start, "dur": duration,
                     "args": {"device": rank % 8, "stream": stream, "correlation": correlation}}
                )  # fmt: skip
        document = {
            "schemaVersion": 1,
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": ranks},
            "traceEvents": records,
        }
        name = f"rank-{rank}.pt.trace.json" + (".gz" if compress else "")
        path = folder / name
        text = (_libkineto_text(document) if layout == "libkineto" else json.dumps(document)).encode()
        path.write_bytes(gzip.compress(text, compresslevel=1) if compress else text)
        paths.append(path)
    return paths


def _libkineto_text(document: dict) -> str:
    """The document laid out as libkineto's ChromeTraceLogger writes it: each event over several lines."""

    def event(record: dict) -> str:
        keys = ",\n    ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in record.items() if k != "args")
        args = ",\n      ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in record.get("args", {}).items())
        return f"  {{\n    {keys},\n    \"args\": {{\n      {args}\n    }}\n  }}"

    head = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in document.items() if k != "traceEvents")
    events = ",\n".join(event(record) for record in document["traceEvents"])
    return f'{{\n{head},\n  "traceEvents": [\n{events}\n  ],\n  "traceName": "made"\n}}\n'
