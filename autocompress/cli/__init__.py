"""The ``acc`` command line (``main``) and its terminal views (``terminal``): the only code that
renders with rich."""
