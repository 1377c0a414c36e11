//! A cart, the entity of the signal-with-start tests: it collects the items sent
//! as `add` signals until one says `checkout`, and returns its owner (the input)
//! and the items. Shared with `reel-postgres`'s tests by path.

use reel::{Ctx, Event, Workflow};

pub struct Cart;

impl Workflow for Cart {
    const NAME: &'static str = "cart";
    type Input = String;
    type Output = Vec<String>;
    async fn run(&self, ctx: Ctx, owner: String) -> reel::Result<Vec<String>> {
        let mut items = vec![owner];
        loop {
            let item: String = ctx.wait_for_signal("add").await?;
            if item == "checkout" {
                return Ok(items);
            }
            items.push(item);
        }
    }
}

/// The ids of the signals a log received, in log order.
pub fn received(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::SignalReceived { signal_id, .. } => Some(signal_id.clone()),
            _ => None,
        })
        .collect()
}
