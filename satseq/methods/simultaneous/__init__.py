"""The simultaneous multi-agent baseline: SAT-Seq's relay, all agents updated at once (``method=simultaneous``)."""
