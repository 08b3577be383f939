"""The ablation (Tables 5-8, Figures 2-13): notebooks 04 and 06.

- ``one_run``: what notebook 04 computes for one configuration besides training and evaluation (Figure 5);
- ``summary``: a grid's runs aggregated over seeds into the paper's tables;
- ``claims``: the ablation's claims (Sections 4.2 and 5) decided on those aggregates;
- ``summary_plots``: their figures.
"""

from heavytail.studies import lazy_submodules

MODULES = ('claims', 'one_run', 'summary', 'summary_plots')
__getattr__, __dir__ = lazy_submodules(__name__, MODULES)
