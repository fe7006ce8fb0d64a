#!/usr/bin/env bash
# Re-measure the documented figures: each registered measurement (docsbench.registry.measurements(): the
# benchmarks' and every case's CaseDocs.measurements) runs, its --json output is saved as benchmarks/results/NAME.json with the
# command and when it ran, then the tables in README.md and docs/*.md are rendered from them.
#
#   benchmarks/measure_readme.sh                 # all of them (hours: the node sweeps need root and take most)
#   benchmarks/measure_readme.sh overhead        # only the named ones
#   benchmarks/measure_readme.sh projection-sweeps projection   # the projection's validation, ~15 minutes
#   benchmarks/measure_readme.sh projection-nodes-sweeps projection-nodes   # ... across nodes, ~2 h 20 min, root
#   python benchmarks/render_readme.py list      # every name, its stage and command, in the order they run
#
# Run it on a quiet machine and nothing else beside it: these are timings.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "$PWD/.venv/bin/python" benchmarks/render_readme.py measure "$@"
