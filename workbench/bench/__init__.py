"""Benchmarks behind every figure in the README; each is ``workbench bench NAME``."""
