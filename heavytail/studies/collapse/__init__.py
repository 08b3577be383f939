"""Ensemble collapse (App. I): notebooks 05 and 09.

- ``calibration``: what the collapse criterion labels on outputs built to be healthy, shrunk or collapsed;
- ``numerics``: softmax trained through two attention paths, and the accuracy of their gradients;
- ``ladder``: from the CPU recipe to Table 3's, one factor at a time, and its claims;
- ``numerics_plots``, ``ladder_plots``: their figures.
"""

from heavytail.studies import lazy_submodules

MODULES = ('calibration', 'ladder', 'ladder_plots', 'numerics', 'numerics_plots')
__getattr__, __dir__ = lazy_submodules(__name__, MODULES)
