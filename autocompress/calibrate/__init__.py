"""Calibration of the cost model on this machine: calibration models, workloads, the fit, its held-out error and margin (``acc profile``)."""
