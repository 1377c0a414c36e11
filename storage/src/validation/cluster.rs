//! The contract of a store several hosts share ([`Cluster`]): leases are exclusive
//! and shared out fairly, writes need the lease (creations aside), the inbox
//! carries mail to the owner, scans by partition see only their partitions, and a
//! closed member gives its leases back.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{events, meta, started, timer};
use crate::{
    Append, Cluster, Mail, Notice, PARTITIONS, Payload, RunState, StorageError, Store, partition_of,
};

/// One location that several members share.
pub trait ClusterBackend: Send + Sync {
    /// Opens a store on the shared location as the member `host_id`.
    fn join(&self, host_id: &str) -> impl Future<Output = Arc<dyn Store>> + Send;
}

/// Runs every cluster check, each on a fresh backend from `new`.
pub async fn run_cluster_checks<B: ClusterBackend, F: Fn() -> B>(new: F) {
    leases_are_exclusive_and_shared(&new()).await;
    writes_need_the_lease(&new()).await;
    inbox_carries_mail_to_the_owner(&new()).await;
    mail_travels_with_a_creation(&new()).await;
    a_creation_without_the_lease_wakes_the_owner(&new()).await;
    mail_stays_for_the_owner(&new()).await;
    a_closed_member_gives_its_leases_back(&new()).await;
}

fn cluster(s: &Arc<dyn Store>) -> &dyn Cluster {
    s.cluster().expect("a member store has a cluster")
}

/// Two members `a` and `b` of `b`, renewed until each holds half the partitions.
async fn two_members<B: ClusterBackend>(b: &B) -> (Arc<dyn Store>, Arc<dyn Store>) {
    let a = b.join("member-a").await;
    let all = cluster(&a).renew().expect("renew a");
    assert_eq!(
        all.gained.len(),
        usize::from(PARTITIONS),
        "a lone member takes every partition"
    );
    let other = b.join("member-b").await;
    let first = cluster(&other).renew().expect("renew b");
    assert!(
        first.gained.is_empty(),
        "partitions leased by a live member are not taken: {first:?}"
    );
    let change = cluster(&a).renew().expect("renew a");
    assert_eq!(
        change.surplus.len(),
        usize::from(PARTITIONS) / 2,
        "with two members, each one's share is half"
    );
    cluster(&a).release(&change.surplus).expect("release");
    let taken = cluster(&other).renew().expect("renew b");
    assert_eq!(taken.gained, change.surplus, "b takes what a gave back");
    (a, other)
}

/// No partition is held by two members; together they hold every one.
pub async fn leases_are_exclusive_and_shared<B: ClusterBackend>(b: &B) {
    let (a, other) = two_members(b).await;
    let (held_a, held_b) = (cluster(&a).held(), cluster(&other).held());
    assert!(held_a.is_disjoint(&held_b), "a partition held twice");
    assert_eq!(held_a.len() + held_b.len(), usize::from(PARTITIONS));
    for p in &held_a {
        assert!(cluster(&a).holds(*p) && !cluster(&other).holds(*p));
    }
    // Renewing again changes nothing.
    let again = cluster(&a).renew().expect("renew");
    assert!(again.gained.is_empty() && again.lost.is_empty() && again.surplus.is_empty());
    a.close();
    other.close();
}

/// A run id of a partition `member` holds.
fn run_held_by(member: &Arc<dyn Store>, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .find(|r| cluster(member).holds(partition_of(r)))
        .expect("some run id")
}

/// Creating a run needs no lease; any other write of a run whose partition the
/// writer does not hold is refused with `NotOwner` and writes nothing.
pub async fn writes_need_the_lease<B: ClusterBackend>(b: &B) {
    let (a, owner) = two_members(b).await;
    let r = run_held_by(&owner, "fenced");
    let mut create = events(&r, 0, vec![started()]);
    create.meta = Some(meta(&r, RunState::Running));
    a.submit(create).await.expect("a creation needs no lease");
    match a.submit(events(&r, 1, vec![super::ev(1)])).await {
        Err(StorageError::NotOwner { run_id, partition }) => {
            assert_eq!((run_id.as_str(), partition), (r.as_str(), partition_of(&r)));
        }
        other => panic!("a write without the lease must be refused, got {other:?}"),
    }
    let meta_only = Append {
        run_id: r.clone(),
        meta: Some(meta(&r, RunState::Completed)),
        ..Append::default()
    };
    assert!(matches!(
        a.submit(meta_only).await,
        Err(StorageError::NotOwner { .. })
    ));
    assert_eq!(
        a.read_log(&r).expect("read").len(),
        1,
        "nothing was written"
    );
    owner
        .submit(events(&r, 1, vec![super::ev(1)]))
        .await
        .expect("the owner writes");
    assert_eq!(owner.read_log(&r).expect("read").len(), 2);
    a.close();
    owner.close();
}

/// Mail posted by one member reaches the owner's inbox (with a notice), once, and
/// is gone once acknowledged; scans by partition see only their partitions, and a
/// run's letters (`letters_of`) only the owner.
pub async fn inbox_carries_mail_to_the_owner<B: ClusterBackend>(b: &B) {
    let (a, owner) = two_members(b).await;
    let r = run_held_by(&owner, "mailed");
    let mut create = events(&r, 0, vec![started()]);
    create.meta = Some(meta(&r, super::suspended()));
    create.add_timers = vec![timer(5, &r, "t")];
    // Created by its owner: no wake-up in the inbox (see the check after next).
    owner.submit(create).await.expect("create");
    let mut notices = cluster(&owner).subscribe();
    let mail = Mail::Signal {
        name: "go".into(),
        signal_id: "s-1".into(),
        payload: Payload(vec![7]),
    };
    cluster(&a).post(&r, &mail).expect("post");
    let part = partition_of(&r);
    let heard = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match notices.recv().await {
                Ok(Notice::Mail(p)) if p == part => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    })
    .await;
    assert_eq!(heard, Ok(true), "the owner hears of the mail");
    let held = cluster(&owner).held();
    let letters = cluster(&owner).letters(&held, 10).expect("letters");
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0].run_id, r);
    assert_eq!(letters[0].mail, Ok(mail));
    assert!(
        cluster(&a)
            .letters(&cluster(&a).held(), 10)
            .expect("letters")
            .is_empty(),
        "mail goes to the owner's partitions only"
    );
    assert_eq!(
        cluster(&owner).letters_of(&r).expect("the run's letters"),
        letters,
        "the run's letters, read by the owner"
    );
    assert!(
        cluster(&owner)
            .letters_of(&run_held_by(&owner, "unmailed"))
            .expect("another run's letters")
            .is_empty()
    );
    assert!(
        cluster(&a).letters_of(&r).expect("letters").is_empty(),
        "only the owner reads a run's letters"
    );
    cluster(&owner).ack(&[letters[0].id]).expect("ack");
    assert!(
        cluster(&owner)
            .letters(&held, 10)
            .expect("letters")
            .is_empty()
    );
    let only = BTreeSet::from([part]);
    let runs = cluster(&owner).unfinished_in(&only).expect("scan");
    assert_eq!(super::ids(&runs), vec![r.as_str()]);
    let timers = cluster(&owner).timers_in(&only).expect("timers");
    assert_eq!(timers.items, vec![timer(5, &r, "t")]);
    let elsewhere = cluster(&a)
        .unfinished_in(&cluster(&a).held())
        .expect("scan");
    assert!(elsewhere.items.is_empty(), "{:?}", super::ids(&elsewhere));
    a.close();
    owner.close();
}

/// Mail in a creating append lands with it, in its owner's inbox; a creation
/// refused (the run exists) posts nothing.
pub async fn mail_travels_with_a_creation<B: ClusterBackend>(b: &B) {
    let (a, owner) = two_members(b).await;
    let r = run_held_by(&owner, "created");
    let wake = Mail::Wake {
        timers: vec![(9, "t".into())],
    };
    let create = || {
        let mut create = events(&r, 0, vec![started()]);
        create.meta = Some(meta(&r, RunState::Running));
        create.mail = Some(wake.clone());
        create
    };
    a.submit(create()).await.expect("create");
    assert!(matches!(
        a.submit(create()).await,
        Err(StorageError::Conflict { .. })
    ));
    let letters = cluster(&owner)
        .letters(&cluster(&owner).held(), 10)
        .expect("letters");
    assert_eq!(
        letters.len(),
        1,
        "one letter, from the creation that landed"
    );
    assert_eq!(
        (letters[0].run_id.as_str(), &letters[0].mail),
        (r.as_str(), &Ok(wake))
    );
    a.close();
    owner.close();
}

/// A creation without mail by a member that does not hold the run's partition
/// (one that has not heard yet that it lost it) posts a wake-up, with the run's
/// timers, to the owner's inbox: the owner may have scanned the partition before
/// the run existed. A creation in a partition the writer holds posts nothing.
pub async fn a_creation_without_the_lease_wakes_the_owner<B: ClusterBackend>(b: &B) {
    let (a, owner) = two_members(b).await;
    let r = run_held_by(&owner, "stale");
    let mut create = events(&r, 0, vec![started()]);
    create.meta = Some(meta(&r, RunState::Running));
    create.add_timers = vec![timer(9, &r, "t")];
    a.submit(create).await.expect("a creation needs no lease");
    let letters = cluster(&owner)
        .letters(&cluster(&owner).held(), 10)
        .expect("letters");
    assert_eq!(letters.len(), 1, "the owner is woken: {letters:?}");
    assert_eq!(
        (letters[0].run_id.as_str(), &letters[0].mail),
        (
            r.as_str(),
            &Ok(Mail::Wake {
                timers: vec![(9, "t".into())]
            })
        )
    );
    let mine = run_held_by(&a, "mine");
    let mut create = events(&mine, 0, vec![started()]);
    create.meta = Some(meta(&mine, RunState::Running));
    a.submit(create).await.expect("create");
    for member in [&a, &owner] {
        let all: BTreeSet<u16> = (0..PARTITIONS).collect();
        let letters = cluster(member).letters(&all, 10).expect("letters");
        assert!(
            letters.iter().all(|l| l.run_id != mine),
            "an owner's own creation posts nothing: {letters:?}"
        );
    }
    a.close();
    owner.close();
}

/// A member that asks for the letters of partitions it believes it holds but does
/// not (taken from it since its last renewal) gets none of them, and cannot
/// remove them: they stay for the owner.
pub async fn mail_stays_for_the_owner<B: ClusterBackend>(b: &B) {
    let (a, owner) = two_members(b).await;
    let r = run_held_by(&owner, "kept");
    let mut create = events(&r, 0, vec![started()]);
    create.meta = Some(meta(&r, RunState::Running));
    create.mail = Some(Mail::Wake { timers: Vec::new() });
    a.submit(create).await.expect("create");
    let stale = cluster(&owner).held();
    assert!(
        cluster(&a).letters(&stale, 10).expect("letters").is_empty(),
        "letters of partitions held by another member"
    );
    let letters = cluster(&owner).letters(&stale, 10).expect("letters");
    assert_eq!(letters.len(), 1, "{letters:?}");
    cluster(&a).ack(&[letters[0].id]).expect("ack");
    assert_eq!(
        cluster(&owner).letters(&stale, 10).expect("letters"),
        letters,
        "a member that does not hold the partition removes nothing"
    );
    a.close();
    owner.close();
}

/// A member that closes gives its leases back: the other takes them at once.
pub async fn a_closed_member_gives_its_leases_back<B: ClusterBackend>(b: &B) {
    let (a, other) = two_members(b).await;
    let given = cluster(&a).held();
    a.close();
    let change = cluster(&other).renew().expect("renew");
    assert_eq!(change.gained, given, "the closed member's partitions");
    assert_eq!(change.held.len(), usize::from(PARTITIONS));
    other.close();
}
