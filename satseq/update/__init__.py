"""Updates: turn batches, the shared mini-batch loop, optimizers, reference log-probs, the clipped
policy-gradient step. Every method's updater is built from these (see :mod:`satseq.update.loop`)."""
