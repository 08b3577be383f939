"""The kernel gap as the training ensemble size N grows (Sec. 4.2, Sec. 5, App. A, App. I): notebook 07.

- ``claims``: the design map's claims (the gap's growth per doubling of N, the numerics behind it);
- ``converged``: every variant at its own learning rate, trained until a stopping rule on validation fires, and its claims;
- ``fair``: a fixed budget annealed to zero, the best validated weights, an lr chosen with exclusions, equivalence rules;
- ``subnormal_ab``: whether flushing subnormal floats changes outcomes (a paired A/B);
- ``plots``, ``converged_plots``: their figures.
"""

from heavytail.studies import lazy_submodules

MODULES = ('claims', 'converged', 'converged_plots', 'fair', 'plots', 'subnormal_ab')
__getattr__, __dir__ = lazy_submodules(__name__, MODULES)
