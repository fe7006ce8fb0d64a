"""A command stopped by SIGTERM cleans up as after Ctrl-C: its ``finally`` blocks run, the exit code says so."""

from __future__ import annotations

import signal
import subprocess
import sys

SCRIPT = """
import argparse, pathlib, sys, time
from workbench import cli

def handler(args):
    try:
        print("ready", flush=True)
        time.sleep(60)
    finally:
        pathlib.Path(sys.argv[1]).write_text("taken down")  # what a sweep does with its miniature cluster

parser = argparse.ArgumentParser()
parser.set_defaults(handler=handler)
cli.build_parser = lambda: parser
sys.exit(cli.main([]))
"""


def test_sigterm_runs_the_commands_clean_up_and_exits_128_plus_15(tmp_path):
    marker = tmp_path / "clean-up"
    process = subprocess.Popen([sys.executable, "-c", SCRIPT, str(marker)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 128 + signal.SIGTERM
    assert marker.read_text() == "taken down"
