//! Unit tests of the planner: see the trajectory simulation in tests/it/sim for sequences.
