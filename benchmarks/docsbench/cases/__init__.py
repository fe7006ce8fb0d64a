"""Each case study's part of the docs, keyed by case name: what is measured for them and how their tables read.

A case's module under ``workbench/cases`` holds what running and analysing it needs; its docs live here, in a
module of its own that makes one ``CaseDocs`` and is listed once in ``_MODULES``. A case with none (a new one, or
one registered from outside) still renders: its block shows its saved headline table and its own text.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from docsbench.markdown import Measurement, ReadmeClause, SavedResults

#: A docs table: the saved result it is named after and all saved results -> its markdown.
Renderer = Callable[[Mapping[str, Any], SavedResults], str]

#: The modules here that each make one ``DOCS``.
_MODULES = ("cpu_tuning", "eval_frequency", "input_pipeline", "pop_scaling", "predict_leak", "ps_vs_allreduce")


@dataclass(frozen=True)
class CaseDocs:
    """What the docs measure and render for one case."""

    case: str
    #: the saved results (and the sweeps they read) of this case, each with the command that measures it
    measurements: tuple[Measurement, ...] = ()
    #: the docs' tables this case renders, by the name of the saved result each comes from
    tables: Mapping[str, Renderer] = field(default_factory=dict)
    #: its clause of the README's lines on the case studies, or None (results not saved yet)
    readme_clause: Callable[[SavedResults], ReadmeClause | None] | None = None
    #: its sweeps the projection is checked on, on this machine's cores and on a miniature cluster's nodes
    projection_sweeps: tuple[str, ...] = ()
    node_sweeps: tuple[str, ...] = ()


_REGISTERED: dict[str, CaseDocs] = {}


def _registered() -> dict[str, CaseDocs]:
    """The registry, with this package's cases' docs loaded on first use (they import the cases, which import
    TensorFlow-free but not light modules); one registered before keeps its place."""
    for module in _MODULES:
        if module not in _LOADED:
            docs = importlib.import_module(f"docsbench.cases.{module}").DOCS
            _REGISTERED.setdefault(docs.case, docs)
            _LOADED.add(module)
    return _REGISTERED


_LOADED: set[str] = set()


def register_case_docs(docs: CaseDocs) -> CaseDocs:
    """Add (or replace) the docs of ``docs.case``: one call for a case registered from outside this package."""
    _registered()[docs.case] = docs
    return docs


def unregister_case_docs(case: str) -> None:
    _registered().pop(case, None)


def case_docs(case: str) -> CaseDocs:
    """The docs of the case called ``case``: empty when it has none."""
    return _registered().get(case) or CaseDocs(case)
