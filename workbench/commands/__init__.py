"""The CLI's commands, one module each (``workbench NAME`` runs ``workbench.commands.NAME``).

``workbench/cli.py`` only parses arguments and calls a ``*_command`` function here. A command
loads what it needs (runs, the cluster's config), calls the layers that do the work (``analysis``,
``figures``, ``report``, ``text``) and prints. The front door (``workbench.Run.report``) reuses
the HTML report of ``analyse``.
"""
