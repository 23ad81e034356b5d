"""Quantised outputs: normalisations that end in fp8, int8 or fp4 with scales, judged by their
contract (formats: the small formats; contract: what a quantised output is defined to be;
oracle: its exact result; judge: order flips allowed, contract flips failed)."""
