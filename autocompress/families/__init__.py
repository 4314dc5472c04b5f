"""Each parent family in one place: its config reader (torch-free, ``readers``) and its torch side
behind one seam (``registry``, ``base``)."""
