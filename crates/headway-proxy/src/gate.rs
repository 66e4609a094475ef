//! Side futures of a connection's task that are polled only after their own waker fired.
//!
//! A client connection's task waits on its connection and, beside it, on the listener's drain
//! signal and its watchdog's timer. `tokio::select!` polls every branch whenever the task
//! wakes, and a connection's task wakes for each read and write; polling a waiting
//! `watch::Receiver::changed` locks the mutex of the channel's waiter list, one channel that
//! every connection of every worker thread waits on. That was a lock shared by both cores,
//! taken at each of the several wake-ups of a proxied request. A [`Gated`] future remembers
//! whether its own waker fired since it was last polled and returns `Pending` at the cost of
//! one atomic swap otherwise; [`drained`] is the drain signal so wrapped.
//!
//! A gated future is meant to be polled by one task, as a branch of that task's own select:
//! the task's waker is recorded when the inner future is polled, and a poll that skips the
//! inner future does not update it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use tokio::sync::watch;

/// What the inner future's waker does: note the wake-up and wake the task.
#[derive(Debug, Default)]
struct Gate {
    /// Whether the inner future asked to be polled since it last was.
    fired: AtomicBool,
    /// The task to wake.
    task: Mutex<Option<Waker>>,
}

impl Wake for Gate {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.store(true, Ordering::Release);
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = task {
            t.wake();
        }
    }
}

/// The future [`drained`] returns.
pub type Drained = Gated<Pin<Box<dyn Future<Output = ()> + Send>>>;

/// A gated future that completes once `signal` holds `true` (at once if it already does), or
/// once its sender is gone: a listener's drain signal as a branch of a connection's select.
pub fn drained(mut signal: watch::Receiver<bool>) -> Drained {
    Gated::new(Box::pin(async move {
        while !*signal.borrow_and_update() {
            if signal.changed().await.is_err() {
                return;
            }
        }
    }))
}

/// A future polled only on its first poll and after its own waker fired (see the module doc).
pub struct Gated<F> {
    inner: F,
    gate: Arc<Gate>,
    waker: Waker,
}

impl<F> Gated<F> {
    /// Wraps `inner`; the first poll polls it.
    pub fn new(inner: F) -> Self {
        let gate = Arc::new(Gate {
            fired: AtomicBool::new(true),
            task: Mutex::new(None),
        });
        Gated {
            inner,
            waker: Waker::from(gate.clone()),
            gate,
        }
    }
}

impl<F> std::fmt::Debug for Gated<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gated")
            .field("fired", &self.gate.fired.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<F: Future + Unpin> Future for Gated<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        if !self.gate.fired.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        {
            let mut task = self.gate.task.lock().unwrap_or_else(|e| e.into_inner());
            match task.as_ref() {
                Some(t) if t.will_wake(cx.waker()) => {}
                _ => *task = Some(cx.waker().clone()),
            }
        }
        let this = &mut *self;
        let mut inner_cx = Context::from_waker(&this.waker);
        Pin::new(&mut this.inner).poll(&mut inner_cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    /// Counts its polls and stays pending, keeping the waker it was last given.
    struct Probe {
        polls: Arc<AtomicUsize>,
        waker: Arc<Mutex<Option<Waker>>>,
        ready: Arc<AtomicBool>,
    }

    impl Future for Probe {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.ready.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    /// A gated [`Probe`], its poll count, the waker it holds and its readiness switch.
    #[allow(clippy::type_complexity)]
    fn probe() -> (
        Gated<Probe>,
        Arc<AtomicUsize>,
        Arc<Mutex<Option<Waker>>>,
        Arc<AtomicBool>,
    ) {
        let polls = Arc::new(AtomicUsize::new(0));
        let waker = Arc::new(Mutex::new(None));
        let ready = Arc::new(AtomicBool::new(false));
        let g = Gated::new(Probe {
            polls: polls.clone(),
            waker: waker.clone(),
            ready: ready.clone(),
        });
        (g, polls, waker, ready)
    }

    /// Counts the wake-ups of the task that polls.
    #[derive(Default)]
    struct TaskWakes(AtomicUsize);
    impl Wake for TaskWakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_inner_future_is_polled_only_after_its_waker_fired() {
        let (mut g, polls, inner_waker, ready) = probe();
        let task = Arc::new(TaskWakes::default());
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);

        assert!(Pin::new(&mut g).poll(&mut cx).is_pending());
        assert_eq!(
            polls.load(Ordering::SeqCst),
            1,
            "the first poll polls the inner future"
        );
        for _ in 0..100 {
            assert!(Pin::new(&mut g).poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::SeqCst), 1, "no wake-up, no poll");
        assert_eq!(task.0.load(Ordering::SeqCst), 0);

        ready.store(true, Ordering::SeqCst);
        inner_waker.lock().unwrap().take().unwrap().wake();
        assert_eq!(
            task.0.load(Ordering::SeqCst),
            1,
            "the inner wake-up wakes the task"
        );
        assert!(Pin::new(&mut g).poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_wake_up_between_polls_of_a_new_task_waker_reaches_the_new_task() {
        let (mut g, polls, inner_waker, _ready) = probe();
        let first = Arc::new(TaskWakes::default());
        let second = Arc::new(TaskWakes::default());
        let w1 = Waker::from(first.clone());
        let w2 = Waker::from(second.clone());
        assert!(Pin::new(&mut g)
            .poll(&mut Context::from_waker(&w1))
            .is_pending());
        inner_waker.lock().unwrap().take().unwrap().wake();
        assert_eq!(first.0.load(Ordering::SeqCst), 1);
        // Polled by a task with another waker after the wake-up: that one is recorded.
        assert!(Pin::new(&mut g)
            .poll(&mut Context::from_waker(&w2))
            .is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        inner_waker.lock().unwrap().take().unwrap().wake();
        assert_eq!(first.0.load(Ordering::SeqCst), 1);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_gated_timer_and_a_gated_watch_complete_beside_a_busy_branch() {
        let (tx, rx) = tokio::sync::watch::channel(false);
        let mut drained = drained(rx);
        let mut tick = Gated::new(Box::pin(tokio::time::sleep(Duration::from_millis(20))));
        let mut yields = 0u32;
        let mut ticked = false;
        let mut sent = false;
        let started = tokio::time::Instant::now();
        loop {
            tokio::select! {
                biased;
                () = &mut drained => break,
                () = &mut tick, if !ticked => {
                    ticked = true;
                    tx.send(true).unwrap();
                    sent = true;
                }
                () = tokio::task::yield_now() => yields += 1,
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "neither the timer nor the drain signal completed ({yields} turns of the busy branch)"
            );
        }
        assert!(ticked && sent);
    }
}
