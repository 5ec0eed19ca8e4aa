"""One shared policy on the relay: SAT-Seq's relay, rewards and loss, every role played by one model (``method=shared_policy``)."""
