"""Choices offered on more than one page."""

# Roughly log-spaced "nice" values from 0.1 to 10 (a log-scale slider, as in OpenDP's DP Wizard).
EPSILONS = [0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0]
