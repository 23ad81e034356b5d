"""Which normalisation a kernel computes, as one typed value.

A :class:`Norm` says everything the oracle, the bounds, the check and the report need to know
about the maths: centred (LayerNorm) or not (RMSNorm), Gemma's (1+γ), a fused residual add, whether
the kernel takes γ and β at all (an affine-free norm has γ = 1, β = 0), and which *definition*
of the result is the reference:

========= ======================================================================================
exact     y = γ·x̂ + β from the exact x̂, correctly rounded once (what torch's LayerNorm and
          Gemma's RMSNorm compute in float and round once)
hf        RMSNorm as Hugging Face's Llama family writes it: x̂ rounded to the storage format,
          then multiplied by γ in that format (``self.weight * hidden_states.to(input_dtype)``):
          the reference is the correctly rounded γ·round_S(x̂)
========= ======================================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from normcheck.errors import invalid

__all__ = ["Norm", "NORMS", "FLAGS", "get", "REFERENCES"]

#: Every norm by its flags: (centred, Gemma's 1+γ, a fused residual add).  The oracle, the
#: bounds and the check read only the flags, so a norm that combines them is one line here
#: (a built-in kernel of it is optional: without one a check judges by the sound bound only).
FLAGS = {
    "layernorm": (True, False, False),
    "rmsnorm": (False, False, False),
    "gemma_rmsnorm": (False, True, False),
    "add_layernorm": (True, False, True),
    "add_rmsnorm": (False, False, True),
    "add_gemma_rmsnorm": (False, True, True),  # FlashInfer's gemma_fused_add_rmsnorm
}
NORMS = tuple(FLAGS)
REFERENCES = ("exact", "hf")


@dataclass(frozen=True)
class Norm:
    """A normalisation: ``name`` is one of :data:`NORMS`; the flags follow from it, except
    ``has_gamma``/``has_beta`` (affine-free kernels) and ``reference``."""

    name: str
    centred: bool
    gemma: bool
    fused: bool
    has_gamma: bool = True
    has_beta: bool = True
    reference: str = "exact"

    @property
    def base(self) -> str:
        """The norm without the fused add: layernorm, rmsnorm or gemma_rmsnorm."""
        return next(n for n, f in FLAGS.items() if f == (self.centred, self.gemma, False))

    @property
    def reads_beta(self) -> bool:
        """Whether the norm adds β: a centred norm with β (RMSNorm has none).  The one
        predicate every module asks."""
        return self.centred and self.has_beta

    @property
    def algorithm(self) -> str:
        """The built-in algorithm family that computes its statistics (two_pass or rms)."""
        return "two_pass" if self.centred else "rms"

    def with_affine(self, gamma: bool, beta: bool) -> "Norm":
        return replace(self, has_gamma=bool(gamma), has_beta=bool(beta) and self.centred)

    def with_reference(self, reference: str) -> "Norm":
        if reference not in REFERENCES:
            raise invalid("reference", reference, f"one of {', '.join(REFERENCES)}",
                          "exact: the correctly rounded exact result; hf: Hugging Face's "
                          "Llama-family RMSNorm (x̂ rounded to storage, then times γ)")
        if reference == "hf" and (self.centred or self.gemma):
            raise invalid("reference", reference, "exact for " + self.name,
                          "the hf definition is the Llama-family RMSNorm (rmsnorm, add_rmsnorm)")
        return replace(self, reference=reference)

    def describe(self) -> str:
        s = self.name
        if not self.has_gamma:
            s += ", no γ"
        if self.centred and not self.reads_beta:
            s += ", no β"
        if self.reference != "exact":
            s += f", {self.reference} definition"
        return s

    def __str__(self):
        return self.name


def get(name) -> Norm:
    """The Norm called ``name`` (a Norm passes through)."""
    if isinstance(name, Norm):
        return name
    if name not in FLAGS:
        raise invalid("norm", name, f"one of {', '.join(NORMS)}",
                      "layernorm and rmsnorm (gemma_* scale by 1+γ); add_* fuse the "
                      "residual add")
    centred, gemma, fused = FLAGS[name]
    return Norm(name, centred=centred, gemma=gemma, fused=fused, has_beta=centred)
