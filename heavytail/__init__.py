"""heavytail: attention kernels for learning maps between heavy-tailed measures.

A literate reproduction of "Attention Kernels for Learning Maps Between Heavy-Tailed
Measures" (Hargenrader, Calvello, Chen). Modules, one job each:

- ``distributions``: Pareto, mirrored Pareto, shifted Gaussian and spliced Pareto laws (eqs. 5, 6, 18-20, 31).
- ``operators``: the sheared swap and matrix inverse benchmarks (eqs. 23-25, App. D).
- ``metrics``: energy distance, Wasserstein-2, Hill diagnostics, sampling floor and bootstrap (eqs. 9-11, 32-41).
- ``kernels``, ``attention``, ``model``, ``transforms``: the attention-kernel suite (Table 1, eq. 7), the
  measure transformer (App. E.1) and symlog (eq. 8).
- ``config``, ``train``, ``evaluate``, ``collapse``, ``io``: the training and evaluation harness (Table 3,
  App. H, I, J): resumable runs with atomic files, the 128-trial evaluation, the collapse criterion.
- ``testbed``, ``integrability``, ``identifiability``, ``ablation``, ``summary``, ``summary_plots``: the logic
  behind the notebooks (Section 4.1, App. A, D, G, J), kept here so that it is tested.
- ``artifacts``: what notebooks import (the repository root, their figure and table folder).
- ``pipeline``: the batch pipeline, one way down: ``report`` -> ``grid`` -> ``notebook`` (papermill) -> io.
"""

__version__ = "0.1.0"
