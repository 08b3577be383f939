"""App. A's moment condition, the kernel-growth x tail-index phase diagram: notebook 08.

- ``moment_condition``: the growth exponent of one query's attention output on nested ensembles (static);
- ``static``: the shipped static reference, every kernel either side of its boundary, and its verdict;
- ``diagram``: the trained map's ratio to the floor against N per (kernel, tail regime);
- ``fixed_weight``: App. A's quantity at trained weights, and the tails entering each block;
- ``confirm``: the confirmatory trained test, pre-registered before its runs;
- ``plots``: their figures.
"""

from heavytail.studies import lazy_submodules

MODULES = ('confirm', 'diagram', 'fixed_weight', 'moment_condition', 'plots', 'static')
__getattr__, __dir__ = lazy_submodules(__name__, MODULES)
