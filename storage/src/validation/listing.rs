//! The listing contract: pages followed cursor to cursor give exactly the runs
//! that pass a query's filters, in its order, whatever the page size; counts by
//! state match the runs stored.

use std::collections::BTreeMap;

use super::{Backend, ev, events, meta, started, suspended};
use crate::listing::{ListCursor, RunQuery};
use crate::{Failure, ParentLink, RunMeta, RunState, StatusKind, Store};

/// Every page of `query`, followed to its end.
fn all_pages(s: &dyn Store, query: &RunQuery) -> Vec<String> {
    let mut query = query.clone();
    let mut out = Vec::new();
    for _ in 0..1000 {
        let page = s.list_page(&query).expect("page");
        assert!(
            page.items.len() <= query.limit.max(1),
            "a page past its limit"
        );
        out.extend(page.items.iter().map(|m| m.run_id.clone()));
        match page.next {
            Some(next) => query.after = Some(next),
            None => return out,
        }
    }
    panic!("pages never end");
}

/// What the pages must hold: the runs passing the filters, in the query's order.
fn expected(all: &[RunMeta], query: &RunQuery) -> Vec<String> {
    let mut rows: Vec<&RunMeta> = all
        .iter()
        .filter(|m| query.matches(m) && query.is_past_cursor(&ListCursor::of(m)))
        .collect();
    rows.sort_by(|a, b| query.order(&ListCursor::of(a), &ListCursor::of(b)));
    rows.iter().map(|m| m.run_id.clone()).collect()
}

/// Pages of every filter and order, at page sizes 1, 3 and 50, hold what the runs
/// stored say they must; the counts by state too.
pub async fn listing_pages_and_counts<B: Backend>(b: &B) {
    let s = b.open().await;
    let states = [
        RunState::Running,
        suspended(),
        RunState::Completed,
        RunState::Failed {
            error: Failure::Other("x".into()),
        },
        RunState::Enqueued,
    ];
    let mut all = Vec::new();
    for i in 0..23u64 {
        let run_id = format!("list-{:02}", (i * 7) % 23);
        let mut m = meta(&run_id, states[(i % 5) as usize].clone());
        // Some runs share a creation time: the run id breaks the tie.
        m.created_at = 1000 + (i / 2) * 10;
        m.workflow = ["a", "b"][(i % 2) as usize].to_owned();
        m.version = 1 + (i % 3) as u32;
        if i % 4 == 0 {
            m.parent = Some(ParentLink {
                run_id: "list-parent".into(),
                wait_id: format!("child#{i}"),
            });
        }
        let mut create = events(&run_id, 0, vec![started()]);
        create.meta = Some(m.clone());
        s.submit(create).await.expect("create");
        all.push(m);
    }
    let base = RunQuery {
        limit: 3,
        ..RunQuery::default()
    };
    let queries = [
        base.clone(),
        RunQuery {
            newest_first: true,
            ..base.clone()
        },
        RunQuery {
            status: Some(vec![StatusKind::Completed, StatusKind::Enqueued]),
            ..base.clone()
        },
        RunQuery {
            workflow: Some("b".into()),
            version: Some(2),
            newest_first: true,
            ..base.clone()
        },
        RunQuery {
            created_after: Some(1030),
            created_before: Some(1090),
            ..base.clone()
        },
        RunQuery {
            parent: Some("list-parent".into()),
            ..base.clone()
        },
        RunQuery {
            after: Some(ListCursor {
                created_ms: 1050,
                run_id: "list-10".into(),
            }),
            newest_first: true,
            ..base.clone()
        },
    ];
    for query in queries {
        for limit in [1, 3, 50] {
            let query = RunQuery {
                limit,
                ..query.clone()
            };
            assert_eq!(
                all_pages(&*s, &query),
                expected(&all, &query),
                "pages of {query:?}"
            );
        }
    }
    let mut counted: BTreeMap<StatusKind, u64> =
        StatusKind::ALL.into_iter().map(|k| (k, 0)).collect();
    for m in &all {
        *counted.entry(m.state.kind()).or_default() += 1;
    }
    assert_eq!(s.count_by_status().expect("counts"), counted);
    s.close();
}

/// Counts and status pages follow runs through state changes committed one
/// append at a time, through deletion and through re-creation under the same id
/// (a writer that remembers what it wrote must not answer from a stale memory).
pub async fn listing_follows_each_change<B: Backend>(b: &B) {
    let s = b.open().await;
    let count = |kind: StatusKind| s.count_by_status().expect("counts")[&kind];
    let with_status = |kind: StatusKind| {
        all_pages(
            &*s,
            &RunQuery {
                status: Some(vec![kind]),
                limit: 50,
                ..RunQuery::default()
            },
        )
    };
    let mut create = events("change-a", 0, vec![started()]);
    create.meta = Some(meta("change-a", RunState::Running));
    s.submit(create).await.expect("create a");
    let mut seq = 1;
    for state in [suspended(), RunState::Running, RunState::Completed] {
        let mut change = events("change-a", seq, vec![ev(seq)]);
        change.meta = Some(meta("change-a", state.clone()));
        s.submit(change).await.expect("change a");
        seq += 1;
        for kind in StatusKind::ALL {
            let expected = u64::from(kind == state.kind());
            assert_eq!(count(kind), expected, "{kind:?} after {state:?}");
            let listed = with_status(kind);
            assert_eq!(
                listed.len() as u64,
                expected,
                "{kind:?} pages after {state:?}"
            );
        }
    }
    s.delete("change-a", seq, 1, Vec::new())
        .await
        .expect("delete a");
    for kind in StatusKind::ALL {
        assert_eq!(count(kind), 0, "{kind:?} after the delete");
        assert!(
            with_status(kind).is_empty(),
            "{kind:?} pages after the delete"
        );
    }
    let mut again = events("change-a", 0, vec![started()]);
    again.meta = Some(meta("change-a", suspended()));
    s.submit(again).await.expect("create a again");
    assert_eq!(count(StatusKind::Suspended), 1);
    assert_eq!(
        with_status(StatusKind::Suspended),
        vec!["change-a".to_owned()]
    );
    assert_eq!(count(StatusKind::Completed), 0);
    let every = RunQuery {
        limit: 50,
        ..RunQuery::default()
    };
    assert_eq!(all_pages(&*s, &every), vec!["change-a".to_owned()]);
    s.close();
}
