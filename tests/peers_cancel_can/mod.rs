//! The tests of `acceptance_peers_cancel_can` by topic (its helpers, and its
//! kill -9 test, stay in the test file): `races`, `segments`, `recovery`.

mod races;
mod recovery;
mod segments;
