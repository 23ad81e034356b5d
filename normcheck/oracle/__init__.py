r"""The oracle: the exact result of every row, correctly rounded, from the values as stored.

A package a step of the flow:

* :mod:`~normcheck.oracle.forward` -- LayerNorm / RMSNorm / fused add forward references and the
  row statistics (the public API, re-exported here: ``oracle.layernorm(x, g, b)`` ...);
* :mod:`~normcheck.oracle.fast` -- the compiled fast path (``fast.cpp``: float64 with a rigorous
  error bound per element, double-double where that cannot settle an element);
* :mod:`~normcheck.oracle.exact` -- exact decisions where float64 cannot decide (integers,
  Fractions, mpmath intervals) and the plain mpmath truth;
* :mod:`~normcheck.oracle.backward` -- the exact gradients dx, dγ, dβ.
"""

from normcheck.oracle.exact import DEFAULT_EPS, ULP_RESOLUTION, mp_reference
from normcheck.oracle.forward import (FusedReference, NormReference, Reference, add_layernorm,
                                      add_rmsnorm, for_norm, layernorm, normalised_parts,
                                      normalised_rows, rmsnorm, saved_statistics)

__all__ = ["for_norm", "Reference", "NormReference", "FusedReference", "DEFAULT_EPS",
           "ULP_RESOLUTION", "layernorm", "rmsnorm", "add_layernorm", "add_rmsnorm",
           "mp_reference", "saved_statistics", "normalised_parts", "normalised_rows"]
