"""SAT-Seq's PAC certificate on the relay episodes verl's validation produces."""
