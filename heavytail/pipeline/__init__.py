"""The batch pipeline around the notebooks, one way down: ``report`` -> ``grid`` -> the grid's parts -> ``notebook``.

- ``notebook``: execute one notebook (jupytext -> papermill -> nbconvert HTML), check the names it takes, and
  index a folder of them;
- ``grid_file``: a grid file, validated and expanded into its configurations and their folder names;
- ``configuration``: one configuration's job (one notebook execution, under the run folder's ``lock``) and
  its execution record;
- ``grid_record``: ``grid.json`` and the grid's ``index.html``;
- ``local`` and ``slurm``: the executors (a process pool or submitit jobs here; a submitit job array on a
  SLURM cluster, whose client commands ``cluster`` asks);
- ``grid``: run a grid file (``python -m heavytail grid``);
- ``report``: the top-level report (``python -m heavytail report``): the notebooks of a params file, with
  the grids run where their notebook sits; ``landing`` writes its front page.

Nothing here is imported by notebooks or the science modules: they import :mod:`heavytail.harness.artifacts`,
which needs neither papermill nor submitit.
"""
