"""Made traces: files in each format ``workbench import`` reads, written with every time chosen, so what an
import or an analysis must find is known (tests, benchmarks, and the notebooks' demos without a cluster's files).

- ``horovod_timeline.write_made_timeline``: a Horovod timeline of any size (0.28's layout or 2019's);
- ``xplane.write_made_xplane``: TensorFlow profiler XPlane files, one per host (``MadeGpuStep`` per step);
- ``kineto.write_made_kineto``: PyTorch profiler (Kineto) traces, one per rank (``MadeKinetoStep``).
"""
