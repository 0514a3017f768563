"""Above the step: variability inside a step, failures and checkpoints over a run."""
