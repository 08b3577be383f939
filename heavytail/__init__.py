"""heavytail: attention kernels for learning maps between heavy-tailed measures.

A literate reproduction of "Attention Kernels for Learning Maps Between Heavy-Tailed Measures" (Hargenrader,
Calvello, Chen). Four layers, each a subpackage, imports running one way (tests/test_architecture.py):

- ``science``: the paper's laws, operators, kernels, attention, model and metrics;
- ``harness``: one run, from its validated configuration to its results on disk;
- ``studies``: the logic and figures behind each notebook, and how claims are decided;
- ``pipeline``: batch execution of notebooks (papermill), grids (local or SLURM) and the report.

Below them: ``names`` (the one table of names), ``io`` (atomic files, JSON), ``cli`` (shared argument handling).
"""

__version__ = "0.1.0"
