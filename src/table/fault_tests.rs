//! The commit paths under storage faults, on an in-memory store that fails
//! chosen requests outright, or applies them and loses the reply.
//!
//! The same faults are injected over HTTP in front of a real S3 server by
//! the Python suite (`tests/robustness/test_faults.py`); these tests pin the core's
//! behaviour without a network.

use std::sync::{Arc, Mutex};

use object_store::memory::InMemory;
use object_store::path::Path;

use super::delete::delete;
use super::scan::At;
use super::schema::SchemaMode;
use super::tests::{cond, create_keyed, ids, int, rows};
use super::versions::latest;
use super::write::append;
use crate::error::Error;
use crate::parquet::filter::predicate;
use crate::store::hooked::{Hook, Hooked, Op, Outcome};
// What a rule does to the requests it matches: fail without applying the
// request (`Fail`), or apply it and lose the reply (`LoseReply`).
use crate::store::hooked::Outcome as Fault;
use crate::store::StoreHandle;

#[derive(Debug)]
struct Rule {
    method: &'static str,
    /// A substring of the object path.
    path: &'static str,
    fault: Fault,
    times: usize,
}

/// Faults by rule, for PUTs, GETs and HEADs.
#[derive(Debug, Default)]
struct Rules {
    rules: Mutex<Vec<Rule>>,
}

/// An `InMemory` store that injects faults by rule.
type Faulty = Hooked<Rules>;

impl Rules {
    fn add(&self, method: &'static str, path: &'static str, fault: Fault, times: usize) {
        self.rules.lock().unwrap().push(Rule {
            method,
            path,
            fault,
            times,
        });
    }
}

impl Hook for Rules {
    /// The fault of the first rule with uses left that matches.
    fn on(&self, op: Op, location: Option<&Path>, _: &InMemory) -> Outcome {
        let method = match op {
            Op::Put => "PUT",
            Op::Get => "GET",
            Op::Head => "HEAD",
            _ => return Outcome::Forward,
        };
        let location = location.map(|l| l.as_ref()).unwrap_or_default();
        let mut rules = self.rules.lock().unwrap();
        match rules
            .iter_mut()
            .find(|r| r.times > 0 && r.method == method && location.contains(r.path))
        {
            Some(rule) => {
                rule.times -= 1;
                rule.fault
            }
            None => Outcome::Forward,
        }
    }
}

fn faulty() -> (Arc<StoreHandle>, Arc<Faulty>) {
    let faults = Arc::new(Faulty::new(Rules::default()));
    let handle = StoreHandle::from_object_store(faults.clone(), "").unwrap();
    (Arc::new(handle), faults)
}

/// A table `t` with ids 0..10 at version 0.
fn table() -> (Arc<StoreHandle>, Arc<Faulty>) {
    let (store, faults) = faulty();
    create_keyed(&store, 0..10);
    (store, faults)
}

/// Every data file and tombstone each version names exists.
fn assert_complete(store: &Arc<StoreHandle>) {
    let rt = crate::runtime::get().unwrap();
    let last = rt.block_on(latest(store, "t")).unwrap().unwrap();
    for v in 0..=last.manifest.version {
        let m = rt
            .block_on(super::versions::read_version(store, "t", v))
            .unwrap();
        let names = m
            .data_files
            .iter()
            .map(|f| f.path.clone())
            .chain(m.tombstones.iter().map(|t| t.path.clone()));
        for name in names {
            let key = format!("t/{name}");
            assert!(
                rt.block_on(store.try_head(&key)).unwrap().is_some(),
                "version {v} names {name}, which is missing"
            );
        }
    }
}

fn append_ids(store: &Arc<StoreHandle>, range: std::ops::Range<i64>) -> crate::Result<u64> {
    append(store.clone(), "t", rows(range), SchemaMode::Strict, None, 2).map(|m| m.version)
}

#[test]
fn a_lost_manifest_reply_commits_the_rows_once() {
    let (store, faults) = table();
    faults.add("PUT", "manifest/v00000001", Fault::LoseReply, 1);
    assert_eq!(append_ids(&store, 10..20).unwrap(), 1);
    assert_eq!(ids(&store, At::Latest, None), (0..20).collect::<Vec<_>>());
    assert_complete(&store);
    // The next commit lands on top of it, once.
    assert_eq!(append_ids(&store, 20..25).unwrap(), 2);
    assert_eq!(ids(&store, At::Latest, None), (0..25).collect::<Vec<_>>());
}

#[test]
fn a_failed_manifest_put_is_tried_again_and_lands_once() {
    let (store, faults) = table();
    faults.add("PUT", "manifest/v00000001", Fault::Fail, 2);
    assert_eq!(append_ids(&store, 10..20).unwrap(), 1);
    assert_eq!(ids(&store, At::Latest, None), (0..20).collect::<Vec<_>>());
    assert_complete(&store);
}

#[test]
fn a_failed_pointer_put_keeps_the_committed_files() {
    for fault in [Fault::Fail, Fault::LoseReply] {
        let (store, faults) = table();
        faults.add("PUT", "_latest_manifest", fault, 100);
        // The version exists once its manifest does: success, files kept.
        assert_eq!(append_ids(&store, 10..20).unwrap(), 1);
        assert_complete(&store);
        faults.rules.lock().unwrap().clear();
        assert_eq!(append_ids(&store, 20..30).unwrap(), 2);
        assert_eq!(ids(&store, At::Latest, None), (0..30).collect::<Vec<_>>());
        assert_complete(&store);
    }
}

#[test]
fn an_outcome_that_cannot_be_learned_is_commit_unknown_and_removes_nothing() {
    let (store, faults) = table();
    faults.add("PUT", "manifest/v00000001", Fault::LoseReply, 1);
    // Reading the version back fails too, every time.
    faults.add("GET", "manifest/v00000001", Fault::Fail, 1000);
    let err = append_ids(&store, 10..20).unwrap_err();
    assert!(matches!(err, Error::CommitUnknown { .. }), "{err}");
    faults.rules.lock().unwrap().clear();
    // It did land: the table reads it, and every file it names is there.
    assert_complete(&store);
    let now = ids(&store, At::Version(1), None);
    assert_eq!(now, (0..20).collect::<Vec<_>>());
}

#[test]
fn a_lost_tombstone_reply_still_deletes_once() {
    for where_ in ["tombstone/", "manifest/v00000001"] {
        let (store, faults) = table();
        faults.add("PUT", where_, Fault::LoseReply, 1);
        let pred = predicate(vec![cond("customer", "==", super::tests::text("c3"))]).unwrap();
        let out = delete(store.clone(), "t", pred, 2).unwrap();
        assert!(out.committed);
        assert_eq!(out.manifest.version, 1);
        let left = ids(&store, At::Latest, None);
        assert_eq!(left, vec![0, 1, 2, 4, 5, 6, 7, 8, 9], "{where_}");
        assert_complete(&store);
        let pk = predicate(vec![cond("id", "<", int(2))]).unwrap();
        delete(store.clone(), "t", pk, 2).unwrap();
        assert_eq!(ids(&store, At::Latest, None), vec![2, 4, 5, 6, 7, 8, 9]);
    }
}

#[test]
fn a_failed_data_upload_commits_nothing() {
    let (store, faults) = table();
    faults.add("PUT", "data/", Fault::Fail, 100);
    let err = append_ids(&store, 10..20).unwrap_err();
    assert!(err.may_have_applied(), "{err}");
    faults.rules.lock().unwrap().clear();
    assert_eq!(ids(&store, At::Latest, None), (0..10).collect::<Vec<_>>());
    assert_eq!(append_ids(&store, 10..20).unwrap(), 1);
    assert_complete(&store);
}

#[test]
fn a_read_back_that_fails_once_is_tried_again() {
    // A manifest PUT whose reply is lost, then a read-back that fails once:
    // the commit still learns that it landed, and moves the pointer.
    let (store, faults) = table();
    faults.add("PUT", "manifest/v00000001", Fault::LoseReply, 1);
    faults.add("GET", "manifest/v00000001", Fault::Fail, 1);
    assert_eq!(append_ids(&store, 10..20).unwrap(), 1);
    faults.rules.lock().unwrap().clear();
    assert_eq!(ids(&store, At::Latest, None), (0..20).collect::<Vec<_>>());
    assert_complete(&store);
}

#[test]
fn a_manifest_put_that_keeps_failing_stops_soon_and_keeps_the_files() {
    let (store, faults) = table();
    faults.add("PUT", "manifest/v00000001", Fault::Fail, 1000);
    let started = std::time::Instant::now();
    let err = append_ids(&store, 10..20).unwrap_err();
    assert!(matches!(err, Error::CommitUnknown { .. }), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    faults.rules.lock().unwrap().clear();
    // Nothing landed, the uploads are still there (a manifest might have
    // named them), and the next append commits once.
    let data = crate::runtime::block_on(store.list("t/data", true))
        .unwrap()
        .unwrap();
    assert_eq!(
        data.objects.len(),
        2,
        "the create's file and the kept upload"
    );
    assert_eq!(append_ids(&store, 10..20).unwrap(), 1);
    assert_eq!(ids(&store, At::Latest, None), (0..20).collect::<Vec<_>>());
}
