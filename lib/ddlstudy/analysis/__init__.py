"""Analysis: intervals and verdict statistics, units, the step-time (cost) model, figures."""
