"""Model + plan -> per-stage ops for one micro-batch."""
