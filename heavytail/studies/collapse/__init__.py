"""Ensemble collapse (App. I): notebooks 05 and 09.

- ``calibration``: what the collapse criterion labels on outputs built to be healthy, shrunk or collapsed;
- ``numerics``: softmax trained through two attention paths, and the accuracy of their gradients;
- ``ladder``: from the CPU recipe to Table 3's, one factor at a time, and its claims;
- ``ladder_tables``: the ladder's runs and what precedes each onset, as tables (descriptive, no verdicts);
- ``mechanism``, ``mechanism_followup``, ``mechanism_views``: why softmax fails at Table 3's model: the screen,
  its follow-up and the interventions;
- ``by_task``: where in the operator family a run's evaluation trials collapse;
- ``tables56``, ``tables56_rules``, ``tables56_views``: Tables 5-6 at Table 3's model, its rules P1-P5, its tables;
- ``numerics_plots``, ``ladder_plots``: their figures.
"""

from heavytail.studies import lazy_submodules

MODULES = ('by_task', 'calibration', 'ladder', 'ladder_plots', 'ladder_tables', 'mechanism', 'mechanism_followup', 'mechanism_views', 'numerics',
           'numerics_plots', 'tables56', 'tables56_rules', 'tables56_views')
__getattr__, __dir__ = lazy_submodules(__name__, MODULES)
