"""The build families: each parent family's torch side behind one seam (``registry``, ``base``)."""
