"""The field: the public LayerNorm/RMSNorm kernels as they ship on the package registry,
judged (``normcheck field``).

``corpus.toml`` pins each release file (project, version, file name, SHA-256) and each of its
files normcheck reads (path and SHA-256); ``specs/`` holds, for each kernel, a spec that
launches it as its project's launcher does, with the verdict we expect and why.  The steps:

* :mod:`normcheck.field.corpus` -- the corpus read and checked;
* :mod:`normcheck.field.sources` -- a release's files, fetched confined and pinned
  (normcheck.backends.fetch), kept in the build cache, nothing of the package built or run;
* :mod:`normcheck.field.judge` -- each kernel checked as ``normcheck check`` checks it, its
  verdict compared with the recorded one;
* :mod:`normcheck.report.field` -- the section: per kernel its project, version, verdict, worst
  ulp and × bound per family, bias and cause.
"""

__all__ = []
