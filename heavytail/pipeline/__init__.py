"""The batch pipeline around the notebooks, one way down: ``report`` -> ``grid`` -> ``notebook`` -> io.

- ``notebook``: execute one notebook (jupytext -> papermill -> nbconvert HTML) and index a folder of them;
- ``grid``: every configuration of a grid file, one notebook execution each (local workers or SLURM);
- ``report``: the top-level report (``python -m heavytail report``): the notebooks of a params file, with
  the grid run where its notebook sits.

Nothing here is imported by notebooks or the science modules: they import :mod:`heavytail.harness.artifacts`,
which needs neither papermill nor submitit.
"""
