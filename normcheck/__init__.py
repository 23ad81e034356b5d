"""normcheck — how many ULPs from the exact result is a LayerNorm/RMSNorm kernel, on which rows,
in which precision, and why.

The flow (see README.md): families/strategies make rows -> a kernel runs on a backend -> the oracle
gives the exact result of the same stored rows -> metrics compare the two -> check/report/properties.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
