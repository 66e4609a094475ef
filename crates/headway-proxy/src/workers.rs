//! The ADC's data-plane threads: one thread per worker, each with a single-threaded tokio
//! runtime of its own ("thread per core").
//!
//! Every listening address has one socket per worker, sharing the address with
//! `SO_REUSEPORT` (`crate::runtime`), so the kernel spreads new connections over the workers
//! by their addresses. A connection then lives its whole life on the worker that accepted it,
//! with that worker's own idle connections to servers ([`crate::upstream::Pool`] keeps a list
//! per worker): no task moves between threads, and no socket is woken on one thread for a
//! task on another. Shared state (server groups, counters, persistence, limits, the cache)
//! is shared as before, through atomics and short locks.
//!
//! Why not tokio's multi-thread runtime: measured with wrk (64 keep-alive connections, 128 B
//! answers) on two cores, it cost 16.4 µs of CPU per request with two workers against 13.8 µs
//! with one — mostly user time, spent on data last touched by the other core: work stealing
//! moved a connection's task between the workers, and each request used server connections
//! shared by all. Two single-threaded processes sharing the port with `SO_REUSEPORT` cost
//! 12.2–13.0 µs per request, HAProxy with two threads 12.4–12.7 µs.
//!
//! Tasks a connection spawns (HTTP/2 streams, a lingering close, a cache revalidation) run on
//! its worker; health monitors, reloads and the admin API run on the caller's runtime.

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

thread_local! {
    /// The index of the worker this thread is, if it is one.
    static INDEX: Cell<Option<usize>> = const { Cell::new(None) };
}

/// A worker's part of something every worker updates (its idle connections, its counter
/// shard), on a cache line of its own: parts that shared a line would move it between the
/// cores at every update, as one shared value would.
#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct CacheLine<T>(pub(crate) T);

/// The index of the worker the calling thread is (0-based), `None` on any other thread.
pub fn current() -> Option<usize> {
    INDEX.get()
}

/// How often an idle worker wakes; see [`heartbeat`].
const HEARTBEAT: Duration = Duration::from_millis(250);

/// Keeps a timer due within [`HEARTBEAT`] on the worker at all times.
///
/// tokio's timer wakes its own thread's reactor (an `eventfd` write, and one more `epoll_wait`
/// turn) whenever a new timer is due earlier than the earliest one the reactor went to sleep
/// with. Every connection starts timers (handshake, request header, idle), and on a worker with
/// no earlier timer each of them did that: one extra `write` and wake-up per connection, seen
/// with `strace -c` as one `write` per TLS handshake. With this timer pending, connection
/// timers (all longer than it) are never the earliest.
async fn heartbeat() {
    loop {
        tokio::time::sleep(HEARTBEAT).await;
    }
}

/// The running worker threads. Dropping it stops them: their runtimes end, and with them every
/// task still on them (call after connections have drained).
#[derive(Debug)]
pub struct Workers {
    workers: Vec<Worker>,
}

#[derive(Debug)]
struct Worker {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Workers {
    /// Starts `n` workers (at least one), named `adc-worker-I`.
    pub fn start(n: usize) -> io::Result<Workers> {
        let mut workers = Vec::with_capacity(n.max(1));
        for i in 0..n.max(1) {
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let (stop, stopped) = oneshot::channel::<()>();
            let thread = std::thread::Builder::new()
                .name(format!("adc-worker-{i}"))
                .spawn(move || {
                    let rt = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    INDEX.set(Some(i));
                    let _ = ready_tx.send(Ok(rt.handle().clone()));
                    rt.block_on(async {
                        tokio::select! {
                            _ = stopped => {}
                            () = heartbeat() => {}
                        }
                    });
                })?;
            let handle = ready_rx
                .recv()
                .map_err(|_| io::Error::other("a worker thread ended before it started"))??;
            workers.push(Worker {
                handle,
                stop: Some(stop),
                thread: Some(thread),
            });
        }
        Ok(Workers { workers })
    }

    /// How many workers run.
    pub fn len(&self) -> usize {
        self.workers.len()
    }

    /// Always false: there is at least one worker.
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// Runs `task` on worker `i`.
    pub fn spawn<F>(&self, i: usize, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.workers[i % self.workers.len()].handle.spawn(task)
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for w in &mut self.workers {
            if let Some(stop) = w.stop.take() {
                let _ = stop.send(());
            }
        }
        // A worker cannot wait for itself; then the threads end on their own.
        if current().is_some() {
            return;
        }
        for w in &mut self.workers {
            if let Some(t) = w.thread.take() {
                let _ = t.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_worker_runs_its_tasks_on_its_own_thread() {
        let workers = Workers::start(3).unwrap();
        assert_eq!(workers.len(), 3);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let seen: Vec<(Option<usize>, String)> = rt.block_on(async {
            let mut seen = Vec::new();
            for i in 0..3 {
                let h = workers.spawn(i, async {
                    (
                        current(),
                        std::thread::current().name().unwrap_or("").to_string(),
                    )
                });
                seen.push(h.await.unwrap());
            }
            seen
        });
        assert_eq!(
            seen,
            vec![
                (Some(0), "adc-worker-0".to_string()),
                (Some(1), "adc-worker-1".to_string()),
                (Some(2), "adc-worker-2".to_string()),
            ]
        );
        assert_eq!(current(), None, "the test's own thread is no worker");
        drop(workers);
    }

    #[test]
    fn dropping_the_workers_ends_their_tasks() {
        let workers = Workers::start(1).unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        workers.spawn(0, async move {
            let _keep = tx;
            std::future::pending::<()>().await;
        });
        drop(workers);
        // The pending task was dropped with its runtime, and with it the sender.
        assert!(rx.recv().is_err());
    }
}
