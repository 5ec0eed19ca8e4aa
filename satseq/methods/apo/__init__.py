"""A*-PO: policy optimization via optimal advantage regression (spec ``apo_pag.md``, "A*-PO").

Two stages (arXiv 2505.20686, official code ZhaolinGao/A-PO):

- ``vstar``: stage 1, offline. ``V*(x) = beta1 * (logsumexp(r_i / beta1) - ln N)`` from N
  reference-policy samples per prompt, the ``filter_unsolvable`` mask, and the on-disk
  :class:`~satseq.update.vstar.VStarCache` that stage 2 reads (stale caches refused).
- ``loss``: stage 2, online. The squared regression loss
  ``(beta2 * sum_t log(pi/pi_ref) + V*(x) - r)^2`` registered as policy loss ``apo``.

Kept import-light: import the submodules you need (``satseq.algos`` imports ``loss``).
"""
