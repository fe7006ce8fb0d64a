"""File formats in and out: Horovod's timeline (import), Chrome trace (export, opens in Perfetto)."""

from workbench.formats.chrome_trace import to_chrome_trace, write_chrome_trace
from workbench.formats.horovod_timeline import TimelineError, read_horovod_timeline

__all__ = ["TimelineError", "read_horovod_timeline", "to_chrome_trace", "write_chrome_trace"]
