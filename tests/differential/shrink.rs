//! Reproducing and shrinking a failing case.

use std::time::{Duration, Instant};

use proptest::strategy::ValueTree;
use proptest::test_runner::{RngAlgorithm, TestRng};

use super::SHRINK_HANG;
use super::checks::Failure;
use super::generate::Case;
use super::harness::run_batch;

/// Whether `case` fails, trying it four times at once (failures depend on timing).
async fn fails(case: &Case) -> anyhow::Result<Option<Failure>> {
    let verdicts = run_batch(&vec![case.clone(); 4], SHRINK_HANG).await?;
    Ok(verdicts.into_iter().find_map(Result::err))
}

/// Shrinks a failing case with proptest's value tree, within a time budget.
pub(crate) async fn shrink(
    mut tree: Box<dyn ValueTree<Value = Case>>,
    failure: Failure,
    budget: Duration,
) -> anyhow::Result<(Case, Failure, usize)> {
    let deadline = Instant::now() + budget;
    let mut best = (tree.current(), failure);
    let mut tries = 0;
    if budget.is_zero() || !tree.simplify() {
        return Ok((best.0, best.1, tries));
    }
    while Instant::now() < deadline {
        tries += 1;
        let candidate = tree.current();
        match fails(&candidate).await? {
            // Only the same kind of failure: another kind is another bug.
            Some(f) if f.kind == best.1.kind => {
                best = (candidate, f);
                if !tree.simplify() {
                    break;
                }
            }
            _ => {
                if !tree.complicate() {
                    break;
                }
            }
        }
    }
    Ok((best.0, best.1, tries))
}

/// The generator's random source for a seed.
pub(crate) fn rng(seed: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&seed.rotate_left(i as u32 * 16).to_le_bytes());
    }
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}
