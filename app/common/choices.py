"""Choices offered on more than one page."""

# Roughly log-spaced "nice" values from 0.1 to 10 (a log-scale slider, as in OpenDP's DP Wizard).
EPSILONS = [0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0]
# Augmentation multiplicity K (De et al. 2022) and parameter-averaging decays β offered by Train and Sweep.
AUGMENTATION_MULTIPLICITIES = [1, 2, 4, 8, 16, 32]
EMA_DECAYS = [0.0, 0.9, 0.99, 0.995, 0.999, 0.9999]
