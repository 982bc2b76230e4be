"""The textbook private learners of seed 004 (Dwork & Roth ch. 11): budgets, mechanisms and training."""
