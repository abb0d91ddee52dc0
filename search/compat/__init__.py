"""What hypersweep needs from the libraries it runs on, checked: Optuna's private API behind one seam
(:mod:`search.compat.optuna_private`), and the versions found against the ones tested (:mod:`search.compat.versions`)."""
