"""The science: the paper's objects as pure functions and modules on tensors.

- ``distributions``: Pareto, mirrored Pareto, shifted Gaussian and spliced Pareto laws (eqs. 5, 6, 18-20, 31);
- ``operators``: the sheared swap and matrix inverse benchmarks (eqs. 23-25, App. D);
- ``kernels``: the attention kernels g of Table 1 (log g, its derivative, the flash path's ratio form);
- ``attention``: kernel attention (eq. 7) through its backends (dense, tiled, flash, flex, SDPA); the flash path
  as compiled tile passes (``flash_attention``) and as one fused C++ loop (``flash_native``, ``flash_native.cpp``);
- ``model``, ``transforms``: the measure transformer (App. E.1) and symlog (eq. 8);
- ``energy``, ``metrics``: energy distance, Wasserstein-2, Hill diagnostics, sampling floor, bootstrap
  (eqs. 9-11, 32-41);
- ``collapse``: the collapse criterion on output ensembles (App. I).

May import: ``heavytail.names``, ``heavytail.io`` and each other; never the harness, studies or pipeline.
"""
