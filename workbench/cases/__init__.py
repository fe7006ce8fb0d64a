"""Case studies: each module runs one experiment end to end and summarises it.

Every case module offers ``run(...)`` (the Python API the notebooks call) and ``main(args)``
(``workbench run CASE``), writing results as Parquet plus one self-contained HTML report.
"""

from __future__ import annotations

import argparse
import importlib

CASES: dict[str, str] = {
    "eval-frequency": "workbench.cases.eval_frequency",
    "predict-leak": "workbench.cases.predict_leak",
}


def run_case(name: str, args: argparse.Namespace) -> int:
    """Dispatch ``workbench run NAME`` to its case module."""
    if name not in CASES:
        raise ValueError(f"unknown case {name!r}: choose one of {', '.join(CASES)}")
    module = importlib.import_module(CASES[name])
    return int(module.main(args))
