"""The agent update order (satseq's :class:`satseq.methods.sat_seq.agent_scheduler.AgentScheduler`:
fixed, random (seeded per stage, resumable), round_robin, greedy by mean |A|)."""
from satseq.methods.sat_seq.agent_scheduler import SCHEDULER_MODES, AgentScheduler

__all__ = ["AgentScheduler", "SCHEDULER_MODES"]
