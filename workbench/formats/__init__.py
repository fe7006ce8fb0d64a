"""File formats in and out: the traces ``workbench import`` reads (each format registers its reader in
``registry``), Horovod's timeline, one trace of a whole run (export: Perfetto, chrome://tracing)."""

from workbench.formats.horovod_timeline import TimelineError, iter_horovod_timeline, read_horovod_timeline
from workbench.formats.trace_export import TraceExport, export_trace, write_chrome_trace

__all__ = [
    "TimelineError",
    "TraceExport",
    "export_trace",
    "iter_horovod_timeline",
    "read_horovod_timeline",
    "write_chrome_trace",
]
