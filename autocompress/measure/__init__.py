"""Measurement in the real engine: the engine worker process, interleaved and paired runs, ``acc verify``,
and the engine adapters (``engines``)."""
