//! Request coalescing: concurrent misses for one URL make one request to the servers.
//!
//! The first miss becomes the [`Leader`] of a fill and goes to the servers; requests for the
//! same key that arrive while it is in flight get a [`Waiter`] and wait (bounded by the group's
//! `coalesce_wait`) for its [`Outcome`]: the object it stored (they are answered from it), or
//! that nothing was stored (they go to the servers themselves). A leader that goes away
//! without an outcome (its client left before the response, a panic) counts as
//! [`Outcome::Failed`] for its waiters.
//!
//! Ordering invariant, which makes "exactly one fetch" hold without a window: a leader stores
//! its object *before* it leaves the in-flight map, and [`Inflight::join`] looks in the store
//! again under the map's lock when it finds no fill, so a request either sees the fill, or the
//! stored object.
//!
//! Cancel safety: [`Waiter::wait`] may be dropped at any point; it only reads.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;

use super::store::{Key, Object};

/// How a fill ended.
#[derive(Clone)]
pub enum Outcome {
    /// The response was stored: answer from it.
    Stored(Arc<Object>),
    /// The response was answered but not stored (uncacheable, too large).
    NotStored,
    /// No response (the servers failed, or the leader went away).
    Failed,
}

/// The fills in flight, by key.
#[derive(Default)]
pub struct Inflight {
    map: Mutex<HashMap<Key, watch::Receiver<Option<Outcome>>>>,
}

/// What [`Inflight::join`] found.
pub enum Join<T> {
    /// No fill was in flight and `recheck` found nothing: this request leads one.
    Lead(Leader),
    /// A fill is in flight: wait for it.
    Wait(Waiter),
    /// No fill, but `recheck` found this (a fill ended just now).
    Found(T),
}

impl Inflight {
    /// Joins the fill of `key`, or starts one. `recheck` looks in the store again (under the
    /// map's lock; see the module doc).
    pub fn join<T>(self: &Arc<Self>, key: Key, recheck: impl FnOnce() -> Option<T>) -> Join<T> {
        let mut map = self.map.lock();
        if let Some(rx) = map.get(&key) {
            return Join::Wait(Waiter { rx: rx.clone() });
        }
        if let Some(found) = recheck() {
            return Join::Found(found);
        }
        let (tx, rx) = watch::channel(None);
        map.insert(key, rx);
        Join::Lead(Leader {
            key,
            tx: Some(tx),
            inflight: self.clone(),
        })
    }

    /// Fills in flight now.
    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    /// Whether no fill is in flight.
    pub fn is_empty(&self) -> bool {
        self.map.lock().is_empty()
    }
}

/// The request that fetches for the others. Dropping it without [`Leader::finish`] ends the
/// fill as [`Outcome::Failed`].
pub struct Leader {
    key: Key,
    tx: Option<watch::Sender<Option<Outcome>>>,
    inflight: Arc<Inflight>,
}

impl Leader {
    /// Ends the fill: leaves the in-flight map, then tells the waiters. Store the object first.
    pub fn finish(mut self, outcome: Outcome) {
        self.end(outcome);
    }

    /// Whether requests are waiting for this fill.
    pub fn has_waiters(&self) -> bool {
        self.tx.as_ref().is_some_and(|t| t.receiver_count() > 1)
    }

    fn end(&mut self, outcome: Outcome) {
        let Some(tx) = self.tx.take() else {
            return;
        };
        {
            let mut map = self.inflight.map.lock();
            if map
                .get(&self.key)
                .is_some_and(|rx| rx.same_channel(&tx.subscribe()))
            {
                map.remove(&self.key);
            }
        }
        let _ = tx.send(Some(outcome));
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.end(Outcome::Failed);
    }
}

/// A request waiting for another's fill.
pub struct Waiter {
    rx: watch::Receiver<Option<Outcome>>,
}

impl Waiter {
    /// The fill's outcome, or `None` when it took longer than `limit`.
    pub async fn wait(mut self, limit: Duration) -> Option<Outcome> {
        match tokio::time::timeout(limit, self.rx.wait_for(Option::is_some)).await {
            Ok(Ok(v)) => v.clone(),
            // The leader's sender went away without an outcome.
            Ok(Err(_)) => Some(Outcome::Failed),
            Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_leader_the_others_wait_and_get_its_outcome() {
        let inflight = Arc::new(Inflight::default());
        let Join::Lead(leader) = inflight.join::<()>(7, || None) else {
            panic!("the first request leads")
        };
        let mut waiters = Vec::new();
        for _ in 0..100 {
            match inflight.join::<()>(7, || panic!("no recheck while a fill is in flight")) {
                Join::Wait(w) => waiters.push(tokio::spawn(w.wait(Duration::from_secs(5)))),
                _ => panic!("others wait"),
            }
        }
        // Another key is independent.
        assert!(matches!(inflight.join::<()>(8, || None), Join::Lead(_)));
        tokio::task::yield_now().await;
        assert!(leader.has_waiters());
        leader.finish(Outcome::NotStored);
        for w in waiters {
            assert!(matches!(w.await.unwrap(), Some(Outcome::NotStored)));
        }
        assert!(inflight.is_empty());
        // After the fill, the recheck decides.
        assert!(matches!(inflight.join(7, || Some(1)), Join::Found(1)));
    }

    #[tokio::test]
    async fn a_leader_that_goes_away_fails_its_waiters_and_waits_are_bounded() {
        let inflight = Arc::new(Inflight::default());
        let Join::Lead(leader) = inflight.join::<()>(1, || None) else {
            panic!()
        };
        let Join::Wait(w) = inflight.join::<()>(1, || None) else {
            panic!()
        };
        let Join::Wait(slow) = inflight.join::<()>(1, || None) else {
            panic!()
        };
        assert!(slow.wait(Duration::from_millis(10)).await.is_none());
        drop(leader);
        assert!(matches!(
            w.wait(Duration::from_secs(1)).await,
            Some(Outcome::Failed)
        ));
        assert_eq!(inflight.len(), 0);
    }
}
