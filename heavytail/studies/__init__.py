"""The studies: the logic behind each notebook, with its plots beside it, kept here so that it is tested.

- ``integrability`` (notebook 01), ``testbed`` (02), ``identifiability`` (03), ``ablation`` (04),
  ``kernel_gap`` and ``kernel_gap_plots`` (05, 07), ``summary`` and ``summary_plots`` (06);
- ``claims``: how a claim is decided: the verdict states, the calibrated decision rules, the claim record.

May import: the harness, the science, ``heavytail.names`` and ``heavytail.io``; never the pipeline.
"""
