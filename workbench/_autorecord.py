"""Recording inside an unmodified script: a recorder per rank, memory/CPU sampling, Keras hooks.

Started by ``workbench/_profile_boot/sitecustomize.py``. Keras is instrumented only if the script
imports it: a post-import hook wraps ``Model.fit`` / ``Model.evaluate`` to add the recorder's
callback, so a script that never uses Keras pays nothing.
"""

from __future__ import annotations

import atexit
import functools
import importlib.abc
import importlib.machinery
import os
import sys
from typing import Any

from workbench.recorder import Recorder

_KERAS_TRAINING_MODULES = ("keras.src.engine.training", "tf_keras.src.engine.training")
_recorder: Recorder | None = None


def start(run_path: str) -> Recorder:
    """Create this rank's recorder and hook Keras when it gets imported."""
    global _recorder
    interval = float(os.environ.get("WORKBENCH_MEMORY_INTERVAL", "0.2"))
    _recorder = Recorder(run_path, memory_interval_s=interval)
    atexit.register(_recorder.close)
    sys.meta_path.insert(0, _PostImportHook(_KERAS_TRAINING_MODULES, _instrument_keras))
    return _recorder


def _with_callback(method: Any) -> Any:
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _recorder is not None:
            callbacks = list(kwargs.get("callbacks") or [])
            if not any(type(cb).__name__ == "RecorderCallback" for cb in callbacks):
                callbacks.append(_recorder.keras_callback())
            kwargs["callbacks"] = callbacks
        return method(self, *args, **kwargs)

    return wrapper


def _instrument_keras(module: Any) -> None:
    model = getattr(module, "Model", None)
    if model is not None:
        model.fit = _with_callback(model.fit)
        model.evaluate = _with_callback(model.evaluate)


class _PostImportHook(importlib.abc.MetaPathFinder):
    """Runs ``callback(module)`` right after one of ``names`` has been imported."""

    def __init__(self, names: tuple[str, ...], callback: Any) -> None:
        self.names = set(names)
        self.callback = callback

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in self.names:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None and spec.loader is not None:
                original = spec.loader.exec_module
                callback = self.callback

                def exec_module(module: Any, original: Any = original, callback: Any = callback) -> None:
                    original(module)
                    callback(module)

                spec.loader.exec_module = exec_module  # type: ignore[method-assign]
                return spec
        return None
