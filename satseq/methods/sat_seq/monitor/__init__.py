"""SAT-Seq PAC certificate."""
