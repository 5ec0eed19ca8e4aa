"""PAG: one policy as solver and generative verifier, selective revision (spec ``apo_pag.md``).

``advantages`` (turn-independent, per-role normalized advantages; a plain function, not in the
adv-estimator registry) and ``metrics`` (Acc@t1, Acc@final, verifier accuracy / recalls, answer
change ratio, revision rate, collapse warning). The workflow is
:mod:`satseq.workflows.self_verify`, the rewards :mod:`satseq.envs.self_verify.rewards`.
Kept import-light: import the submodules you need.
"""
