//! The schedule records' contract: plain writes, reads and deletes, and the
//! compare-and-swap that keeps hosts sharing a store from undoing each other's
//! changes (a scheduler advancing a schedule another host just paused or deleted).

use super::Backend;
use crate::{Payload, ScheduleRecord};

fn schedule(id: &str, next_fire: u64) -> ScheduleRecord {
    ScheduleRecord {
        id: id.to_owned(),
        workflow: "w".into(),
        version: 1,
        input: Payload(vec![7]),
        spec: vec![1, 2, 3],
        paused: false,
        next_fire,
        last_run: None,
        buffered: None,
    }
}

/// Schedules are stored, listed in id order, swapped only from what is stored,
/// created by a swap only where none exists, and deleted.
pub async fn schedules_swap_atomically<B: Backend>(b: &B) {
    let store = b.open().await;
    let a = schedule("a", 10);
    assert!(
        store.swap_schedule(None, &a).expect("create a"),
        "swap from nothing creates a schedule"
    );
    assert!(
        !store.swap_schedule(None, &a).expect("create a again"),
        "swap from nothing refuses an id that exists"
    );
    store.put_schedule(&schedule("b", 20)).expect("put b");
    let ids: Vec<String> = store
        .list_schedules()
        .expect("list")
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(ids, ["a", "b"], "schedules list in id order");

    // Host 1 read `a`; host 2 pauses it; host 1's advance must not undo the pause.
    let mut paused = a.clone();
    paused.paused = true;
    assert!(store.swap_schedule(Some(&a), &paused).expect("pause"));
    let mut advanced = a.clone();
    advanced.next_fire = 11;
    assert!(
        !store
            .swap_schedule(Some(&a), &advanced)
            .expect("stale advance"),
        "a swap from a record that is no longer stored is refused"
    );
    assert_eq!(
        store.get_schedule("a").expect("get a"),
        Some(paused.clone()),
        "the refused swap wrote nothing"
    );

    // A deleted schedule is not brought back by a swap from its old record.
    store.delete_schedule("a").expect("delete a");
    assert!(
        !store
            .swap_schedule(Some(&paused), &advanced)
            .expect("swap deleted"),
        "a swap of a deleted schedule is refused"
    );
    assert_eq!(store.get_schedule("a").expect("get deleted"), None);
    store.close();
}
