//! Sleeping on a word of shared memory until another process changes it.
//!
//! `futex(2)` without `FUTEX_PRIVATE_FLAG`: the kernel keys the wait on the physical page,
//! so a waiter in one process is woken by a `wake` from any process mapping the same
//! segment. Used for doorbells, which ring rarely and must not be spun on: the machines
//! this runs on are often oversubscribed.

use rustix::thread::futex::{self, Flags};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Sleep while `word` still holds `seen`, at most `timeout` (spurious returns allowed: the
/// caller re-reads the word).
pub fn wait(word: &AtomicU32, seen: u32, timeout: Duration) {
    let ts = super::super::timespec(timeout);
    // EAGAIN (the word changed), ETIMEDOUT and EINTR all mean: look again.
    let _ = futex::wait(word, Flags::empty(), seen, Some(&ts));
}

/// Wake every process sleeping on `word`.
pub fn wake_all(word: &AtomicU32) {
    let _ = futex::wake(word, Flags::empty(), u32::MAX);
}

/// Ring a doorbell: change the word, then wake its sleepers.
pub fn ring(word: &AtomicU32) {
    word.fetch_add(1, Ordering::Release);
    wake_all(word);
}
