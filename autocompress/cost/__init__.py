"""Cost model: analytic roofline per op (``roofline``), engine steps of a workload and their
latency (``latency``), engine memory accounting (``memory``), calibration profiles (``profile``,
data in ``cost/profiles/*.json``). Pure Python."""
