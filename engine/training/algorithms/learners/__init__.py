"""The textbook private learners of Dwork & Roth 2014, ch. 11: budgets, mechanisms and training."""
