"""The run harness: one configuration from its parameters to its results on disk.

- ``config``: :class:`RunConfig`, every default of a run, validated once at the boundary (Table 3);
- ``rundir``: the one owner of a run folder's layout;
- ``train``, ``evaluate``, ``experiment``: resumable training, the 128-trial evaluation (App. H), and
  both as one unit of work;
- ``provenance``: the commit, tree state, torch, machine and date a run records for itself;
- ``artifacts``: where a notebook writes its figures and tables, and where the repository is.

May import: ``heavytail.names``, ``heavytail.io``, ``heavytail.cli`` and the science; never the studies or
the pipeline.
"""
