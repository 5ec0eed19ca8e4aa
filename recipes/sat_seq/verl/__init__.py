"""SAT-Seq as a verl recipe (place this directory at ``verl/recipes/sat_seq``; README.md).

Importing the package registers, in verl's registries, SAT-Seq's sequence-aware advantage
(``algorithm.adv_estimator=sat_seq``) and its sequence-ratio losses
(``actor_rollout_ref.actor.policy_loss.loss_mode=sat_seq|sat_seq_token|sat_seq_product``); verl imports
it in every worker through ``actor_rollout_ref.model.external_lib=recipes.sat_seq``. The formulas are
satseq's (``satseq.methods.sat_seq``); this package maps verl's tensors onto them.
"""
from .adv import seqaware  # noqa: F401  (registers adv_estimator sat_seq)
from .loss import seq_ratio_loss  # noqa: F401  (registers loss_mode sat_seq, sat_seq_token, sat_seq_product)
