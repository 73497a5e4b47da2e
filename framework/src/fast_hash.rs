//! A fast hash for maps whose keys are not chosen by an adversary.
//!
//! FxHash's multiply-rotate: a few cycles per word where std's SipHash takes tens. Used
//! where a map is looked up on a hot path with keys the process itself makes: notify ids
//! in the cost model's replay (one lookup per Post and Wait), and a communicator's
//! program cache (one lookup per call, keyed by the call's own arguments: a caller can
//! only slow its own process down by crafting colliding calls).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// FxHash's multiply-rotate hasher.
#[derive(Default, Clone, Copy)]
pub(crate) struct FastHasher(u64);

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.add(u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
        }
        words
            .remainder()
            .iter()
            .for_each(|&b| self.add(u64::from(b)));
    }
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A `HashMap` with [`FastHasher`].
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::Hash;

    fn hash(v: impl Hash) -> u64 {
        let mut h = FastHasher::default();
        v.hash(&mut h);
        h.finish()
    }

    #[test]
    fn bytes_in_words_and_in_their_tail_all_count() {
        assert_ne!(hash(b"abcdefgh1"), hash(b"abcdefgh2"));
        assert_ne!(hash(b"abcdefgh"), hash(b"abcdefgi"));
        assert_ne!(hash((1u32, 2usize)), hash((2u32, 1usize)));
    }
}
