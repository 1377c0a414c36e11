//! The tests of `acceptance_peers_restarts` by topic (its helpers stay in the
//! test file): `signals` (failures and restarts around timers, steps, signals
//! and passivation), `operate` (pause, cancel, a child's end and continue-as-new
//! racing a restart), `storms` (lost write answers, many runs crashing at once).

mod operate;
mod signals;
mod storms;
