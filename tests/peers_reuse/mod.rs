//! The tests of `acceptance_peers_reuse` by topic (its helpers and workflows
//! stay in the test file): `activation` (a finished run's actor activating, for
//! a child's late end or a late signal, while its run is deleted and its id
//! taken), `ids` (duplicate starts, deletes and new starts under one id,
//! around restarts and passivation), `races` (signal-with-start, retention and
//! a child's late end racing deletes and reuse).

mod activation;
mod ids;
mod races;
