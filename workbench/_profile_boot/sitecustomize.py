"""Loaded by Python at start-up on every rank that ``workbench profile`` launches (via PYTHONPATH).

It only acts when WORKBENCH_PROFILE_RUN names a run directory, so nothing else is affected.
"""

import os

if os.environ.get("WORKBENCH_PROFILE_RUN"):
    try:
        from workbench.autorecord import start

        start(os.environ["WORKBENCH_PROFILE_RUN"])
    except Exception as error:  # profiling must never stop the user's script
        import sys

        print(f"workbench profile: recording disabled on this rank ({error})", file=sys.stderr)
