"""Workloads that run on the ranks: one module per case study (model, data, training loop)."""
