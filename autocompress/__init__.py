"""autocompress: deployment contract in, compressed model out.

Importing the package stays cheap (no torch, no cvxpy): ``acc check`` must answer in well under
two seconds. Heavy dependencies are imported inside the stages that use them.
"""

__version__ = "0.1.0"
