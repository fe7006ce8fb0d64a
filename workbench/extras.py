"""What each part of the workbench needs beyond the core install, and the one line when it is missing.

The core install (``pip install workbench``) reads, analyses, reports, exports and projects runs; it brings
no TensorFlow, Horovod, MPI or Jupyter. Every other part is an extra named for what it enables. TensorFlow
and Horovod are never declared: they are the user's own builds (a GPU ``tensorflow``, an NGC container's,
a conda or module one), and requiring one distribution of TensorFlow would install it over another
(``tensorflow`` and ``tensorflow-cpu`` both write the ``tensorflow/`` package). So they are checked here,
at the moment a part needs them, as TensorFlow Addons does.

A part that lacks a package raises :class:`MissingExtra`: one line naming the package and the extra. The
command line prints it as such; IPython shows it without a traceback.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Requirement:
    """One package a part needs: the module to import, what pip installs, and where it comes from."""

    module: str
    package: str
    #: The extra that installs it; empty for TensorFlow and Horovod, which stay the user's own builds.
    extra: str = ""


@dataclass(frozen=True)
class Part:
    """A part of the workbench as a user meets it, and what it needs beyond the core install."""

    name: str
    what: str
    needs: tuple[Requirement, ...]


_TENSORFLOW = Requirement("tensorflow", "tensorflow")
_IPYPARALLEL = Requirement("ipyparallel", "ipyparallel", "cluster")
_MPI4PY = Requirement("mpi4py", "mpi4py", "cluster")
_IPYWIDGETS = Requirement("ipywidgets", "ipywidgets", "notebook")
_ANYWIDGET = Requirement("anywidget", "anywidget", "notebook")
_TQDM = Requirement("tqdm", "tqdm", "notebook")

#: Every part beyond the core, in the order ``workbench doctor`` lists them.
PARTS: dict[str, Part] = {
    part.name: part
    for part in (
        Part("record", "the recorder and `workbench profile` of a TensorFlow script", (_TENSORFLOW,)),
        Part("cluster", "`Cluster`: ipyparallel engines that are MPI ranks", (_IPYPARALLEL, _MPI4PY)),
        Part(
            "cases",
            "the five case studies (`workbench run`, notebooks 01-06)",
            (
                _TENSORFLOW,
                _IPYPARALLEL,
                _MPI4PY,
                Requirement("sklearn", "scikit-learn", "cases"),
                Requirement("PIL", "pillow", "cases"),
            ),
        ),
        Part("notebook", "the live dashboard and figure widgets in JupyterLab", (_IPYWIDGETS, _ANYWIDGET, _TQDM)),
        Part(
            "nvml",
            "GPU memory and utilisation sampled by the recorder",
            (Requirement("pynvml", "nvidia-ml-py", "nvml"),),
        ),
    )
}

#: What to do for the packages no extra installs.
_OWN_BUILD = {
    "tensorflow": "install your TensorFlow (`pip install tensorflow`, or `pip install 'workbench[tensorflow-cpu]'` "
    "on a machine without GPUs), or use the environment or container that has it",
    "horovod": "install Horovod built against your TensorFlow and MPI (docs/install.md)",
}


class MissingExtra(ImportError):
    """A package a part of the workbench needs is not installed: one line, naming the package and the extra."""

    def _render_traceback_(self) -> list[str]:
        """IPython shows this line alone instead of a traceback."""
        return [f"{type(self).__name__}: {self}"]


def installed(module: str) -> bool:
    """Whether ``module`` can be imported here, without importing it (TensorFlow takes seconds)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing(part: str, is_installed: Callable[[str], bool | None] | None = None) -> list[Requirement]:
    """The requirements of ``part`` that are not installed (``is_installed(module)``: here, by default)."""
    is_installed = is_installed or installed
    return [need for need in PARTS[part].needs if not is_installed(need.module)]


def _install_extra(extra: str) -> str:
    return f"pip install 'workbench[{extra}]'"


def hint(need: Requirement) -> str:
    """What to type to get ``need``."""
    if not need.extra:
        return _OWN_BUILD.get(need.package, f"pip install {need.package}")
    return _install_extra(need.extra)


def require(part: str, *, for_what: str | None = None) -> None:
    """Raise :class:`MissingExtra` when ``part`` lacks a package: ``for_what`` names what the user asked for."""
    lacking = missing(part)
    if lacking:
        raise MissingExtra(f"{for_what or PARTS[part].what} {needs_line(lacking, part)}")


def require_module(module: str, package: str, extra: str, *, for_what: str) -> None:
    """The same for one module outside the parts (``extra`` empty for the user's own builds)."""
    if not installed(module):
        raise MissingExtra(f"{for_what} {needs_line([Requirement(module, package, extra)])}")


def needs_line(lacking: list[Requirement], part: str = "") -> str:
    """``needs P, which is not installed here: pip install 'workbench[E]'``: one extra where ``part`` is one."""
    names = ", ".join(need.package for need in lacking)
    verb = "is" if len(lacking) == 1 else "are"
    own = [hint(need) for need in lacking if not need.extra]
    extras = list(dict.fromkeys(need.extra for need in lacking if need.extra))
    if len(extras) > 1 and part in PARTS:
        extras = [part]  # each part is also the extra that installs all it needs
    fixes = [*own, *map(_install_extra, extras)]
    return f"needs {names}, which {verb} not installed here: {'; '.join(fixes)}"


def installed_version(module: str) -> str | None:
    """The version of the distribution that provides ``module`` (``tensorflow`` from tensorflow-cpu too)."""
    try:
        from importlib import metadata

        for distribution in metadata.packages_distributions().get(module, []):
            return metadata.version(distribution)
    except Exception:  # a broken install's metadata: no version rather than a failure
        return None
    return None


def keras_3_line(environment: dict[str, str] | None = None) -> str | None:
    """One line when the TensorFlow here gives Keras 3 as ``tf.keras`` (TF 2.16+ without TF_USE_LEGACY_KERAS).

    Under Keras 3 the recorder's callback works, but ``workbench profile`` finds no Keras ``fit``/``predict``
    calls or epochs (Keras 3 has other internals), and Horovod 0.28.1's Keras ``DistributedOptimizer`` does
    not allreduce at all (horovod#4290); with tf_keras and TF_USE_LEGACY_KERAS=1 both work (docs/install.md).
    """
    version = installed_version("tensorflow")
    environment = os.environ if environment is None else environment
    if not version or environment.get("TF_USE_LEGACY_KERAS", "") in ("1", "true", "True"):
        return None
    major, minor = (int(part) if part.isdigit() else 0 for part in [*version.split("."), "0"][:2])
    if (major, minor) < (2, 16):
        return None
    return (
        f"TensorFlow {version} gives Keras 3 as tf.keras: Keras fit/predict calls and epochs are not recorded, and "
        f"Horovod's Keras DistributedOptimizer does not allreduce under Keras 3; {legacy_keras_fix(version)}"
    )


def legacy_keras_fix(tensorflow_version: str, *, tf_keras_installed: bool = False) -> str:
    """How to get Keras 2 as ``tf.keras`` on TensorFlow 2.16+: tf_keras of the same minor version, and the switch."""
    if tf_keras_installed:
        return "set TF_USE_LEGACY_KERAS=1 before TensorFlow is imported (tf_keras is installed)"
    minor = ".".join(tensorflow_version.split(".")[:2])
    return f"pip install 'tf_keras~={minor}.0' and set TF_USE_LEGACY_KERAS=1 before TensorFlow is imported"
