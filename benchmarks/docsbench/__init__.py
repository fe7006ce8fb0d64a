"""What measures and renders the project's own docs, kept out of the product package ``workbench``.

- ``registry``: every saved result behind a table (``Measurement``) and the benchmarks that only feed the docs
  (``workbench bench analysis``, ``timeline``, ``redraw``, ``live``, ``projection``, ``fuzz``, registered with
  ``workbench bench`` through the ``workbench.benchmarks`` entry point group);
- ``markdown``: the tables' cells, units and source lines;
- ``cases``: each case study's docs tables, README clause, measured sweeps, keyed by case name;
- ``projection_check``, ``seed_systems``, ``published_systems``: the projection checked against saved sweeps,
  the published studies' clusters and published large-scale results.

``benchmarks/render_readme.py`` renders the tables from ``benchmarks/results``; ``benchmarks/measure_readme.sh``
measures them again.
"""
