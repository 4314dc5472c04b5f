"""Measurement in the real engine: ``verify`` (acc verify), ``profile`` (acc profile), the engine
worker process, synthetic calibration models, the calibration fit, and engine adapters (``engines``)."""
