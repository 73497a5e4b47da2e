//! The worker pool of the host device.
//!
//! A fixed set of threads pulls jobs from one FIFO queue. A job runs a stream until it blocks
//! on a Wait (the stream is then parked on its notify, holding no thread) or until a big task
//! is split into chunks that several workers share. Idle workers sleep on a condition
//! variable: nothing spins, so an oversubscribed machine loses no time to polling.
//!
//! A job that a worker makes runnable while every other worker is busy (a stream resumed by
//! a Post, say) stays on that worker in a one-job local slot and runs next, skipping the
//! queue and a wakeup; if some worker is idle, it goes to the queue so the idle one takes it.
//!
//! A thread that submits a launch and then waits for it *drains* the queue: it runs queued
//! jobs instead of sleeping ([`WorkerPool::drain`]). Small launches (latency-bound: a few
//! KiB moved) are pushed *quietly* while their submitter is inside [`WorkerPool::quiet`] or
//! draining: no worker is woken, the submitting thread runs them itself, and an 8-rank
//! 1 KiB collective costs no futex call and no context switch. Waking a worker costs more
//! than such a launch's whole work on an oversubscribed machine. A quiet job is never
//! stranded: a drain that ends with jobs still queued wakes the workers, and a waiter
//! whose launch is not done checks for queued jobs every tick it wakes.
//!
//! Memory ordering: pushing a job and popping it go through the queue's mutex, so everything
//! the pushing thread wrote before `push` is visible to the thread that runs the job. A job
//! kept in the local slot runs later on the same thread.

use parking_lot::{Condvar, Mutex};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

pub(crate) type Job = Box<dyn FnOnce() + Send>;

struct Queue {
    jobs: Mutex<(VecDeque<Job>, bool)>,
    ready: Condvar,
    /// Workers waiting for a job.
    idle: AtomicUsize,
    /// Jobs the workers ran (the submitting threads' are not counted).
    worker_jobs: AtomicUsize,
}

thread_local! {
    /// The queue this thread works for (0 on non-worker threads).
    static WORKER_OF: Cell<usize> = const { Cell::new(0) };
    /// The job this worker runs next.
    static NEXT: RefCell<Option<Job>> = const { RefCell::new(None) };
    /// The queue this thread will drain before it sleeps (0: none): quiet pushes to it
    /// wake no worker.
    static DRAINS: Cell<usize> = const { Cell::new(0) };
}

/// A fixed-size pool of worker threads.
pub(crate) struct WorkerPool {
    queue: Arc<Queue>,
    threads: Vec<JoinHandle<()>>,
}

impl WorkerPool {
    /// Start `threads` workers (at least one).
    pub(crate) fn new(threads: usize) -> std::io::Result<Self> {
        Self::start(threads, |i, queue| {
            std::thread::Builder::new()
                .name(format!("oxccl-host-{i}"))
                .spawn(move || worker(&queue))
        })
    }

    /// Start `threads` workers with `spawn(index, queue)`, which runs [`worker`] on a new
    /// thread.
    fn start(
        threads: usize,
        mut spawn: impl FnMut(usize, Arc<Queue>) -> std::io::Result<JoinHandle<()>>,
    ) -> std::io::Result<Self> {
        let queue = Arc::new(Queue {
            jobs: Mutex::new((VecDeque::new(), false)),
            ready: Condvar::new(),
            idle: AtomicUsize::new(0),
            worker_jobs: AtomicUsize::new(0),
        });
        let mut pool = WorkerPool {
            queue,
            threads: Vec::with_capacity(threads.max(1)),
        };
        for i in 0..threads.max(1) {
            let spawned = spawn(i, pool.queue.clone());
            // On failure `pool` drops here, which stops and joins the workers already
            // started: a pool that cannot start leaks no thread.
            pool.threads.push(spawned?);
        }
        Ok(pool)
    }

    /// Number of worker threads.
    pub(crate) fn threads(&self) -> usize {
        self.threads.len()
    }

    /// Jobs the worker threads ran so far.
    #[cfg(test)]
    pub(crate) fn worker_jobs(&self) -> usize {
        self.queue.worker_jobs.load(Ordering::Relaxed)
    }

    /// Queue a job.
    pub(crate) fn push(&self, job: Job) {
        self.queue.jobs.lock().0.push_back(job);
        self.queue.ready.notify_one();
    }

    /// Queue a small job: without waking a worker when this thread will drain the queue
    /// (inside [`Self::quiet`] or [`Self::drain`]), as [`Self::push_local`] otherwise.
    pub(crate) fn push_quiet(&self, job: Job) {
        if DRAINS.get() == self.id() {
            self.queue.jobs.lock().0.push_back(job);
        } else {
            self.push_local(job);
        }
    }

    /// Run `f` with this thread marked as one that will drain the queue: the caller must
    /// [`Self::drain`] afterwards (a submitter that then waits for its launches).
    pub(crate) fn quiet<T>(&self, f: impl FnOnce() -> T) -> T {
        let _draining = Draining::mark(self.id());
        f()
    }

    /// Run queued jobs on this thread while `busy()` holds and the queue has any (quiet
    /// pushes meanwhile stay on this thread); jobs still queued afterwards wake the workers.
    pub(crate) fn drain(&self, mut busy: impl FnMut() -> bool) {
        {
            let _draining = Draining::mark(self.id());
            while busy() && self.run_one() {}
        }
        self.kick();
    }

    /// Wake the workers if jobs are queued (a quiet job whose drainer stopped).
    pub(crate) fn kick(&self) {
        if !self.queue.jobs.lock().0.is_empty() {
            self.queue.ready.notify_all();
        }
    }

    fn id(&self) -> usize {
        Arc::as_ptr(&self.queue) as usize
    }

    /// True when a job is queued.
    pub(crate) fn has_jobs(&self) -> bool {
        !self.queue.jobs.lock().0.is_empty()
    }

    /// Run one queued job on the calling thread; false if the queue was empty. Lets a thread
    /// that waits for its own launches work instead of sleeping.
    pub(crate) fn run_one(&self) -> bool {
        let job = self.queue.jobs.lock().0.pop_front();
        match job {
            Some(job) => {
                job();
                true
            }
            None => false,
        }
    }

    /// Run `job` next on this worker when no other worker is idle; otherwise queue it.
    pub(crate) fn push_local(&self, job: Job) {
        let mine = WORKER_OF.get() == self.id();
        let job = if mine && self.queue.idle.load(Ordering::Relaxed) == 0 {
            match NEXT.with_borrow_mut(|next| {
                if next.is_none() {
                    *next = Some(job);
                    None
                } else {
                    Some(job)
                }
            }) {
                None => return,
                Some(job) => job,
            }
        } else {
            job
        };
        self.push(job);
    }
}

/// Marks this thread as draining a queue until dropped (also when a job unwinds), then
/// restores what it drained before.
struct Draining(usize);

impl Draining {
    fn mark(queue: usize) -> Self {
        Draining(DRAINS.replace(queue))
    }
}

impl Drop for Draining {
    fn drop(&mut self) {
        DRAINS.set(self.0);
    }
}

fn worker(queue: &Arc<Queue>) {
    WORKER_OF.set(Arc::as_ptr(queue) as usize);
    loop {
        let job = {
            let mut guard = queue.jobs.lock();
            loop {
                if let Some(job) = guard.0.pop_front() {
                    break job;
                }
                if guard.1 {
                    return;
                }
                queue.idle.fetch_add(1, Ordering::Relaxed);
                queue.ready.wait(&mut guard);
                queue.idle.fetch_sub(1, Ordering::Relaxed);
            }
        };
        job();
        queue.worker_jobs.fetch_add(1, Ordering::Relaxed);
        while let Some(next) = NEXT.with_borrow_mut(Option::take) {
            next();
            queue.worker_jobs.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.queue.jobs.lock().1 = true;
        self.queue.ready.notify_all();
        let me = std::thread::current().id();
        for t in self.threads.drain(..) {
            // The last reference may be dropped by a job on a worker: never join oneself.
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_pool_that_cannot_start_stops_the_workers_it_started() {
        let exited = Arc::new(AtomicUsize::new(0));
        let result = WorkerPool::start(8, |i, queue| {
            if i == 5 {
                return Err(std::io::Error::other("no more threads"));
            }
            let exited = exited.clone();
            Ok(std::thread::spawn(move || {
                worker(&queue);
                exited.fetch_add(1, Ordering::Relaxed);
            }))
        });
        assert!(result.is_err());
        // The failed start joined the five workers it had started.
        assert_eq!(exited.load(Ordering::Relaxed), 5);
    }

    #[test]
    fn runs_every_job_and_joins_on_drop() {
        let count = Arc::new(AtomicUsize::new(0));
        {
            let pool = WorkerPool::new(3).unwrap();
            for _ in 0..1000 {
                let count = count.clone();
                pool.push(Box::new(move || {
                    count.fetch_add(1, Ordering::Relaxed);
                }));
            }
            // Drop drains the queue before the workers exit.
            while count.load(Ordering::Relaxed) < 1000 {
                std::thread::yield_now();
            }
        }
        assert_eq!(count.load(Ordering::Relaxed), 1000);
    }
}
