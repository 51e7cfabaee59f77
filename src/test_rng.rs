//! Reproducible randomness for tests, without a dependency: xorshift64
//! (13, 7, 17) from a seed, shared by every test that draws keys, cuts
//! batches or damages bytes. Test code only.

/// A xorshift64 generator. Each draw shifts the state, so a seed gives the
/// same sequence on every run and machine; a zero seed stays zero (callers
/// pass a non-zero one).
pub struct TestRng(u64);

impl TestRng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A draw in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

#[cfg(test)]
mod tests {
    use super::TestRng;

    #[test]
    fn the_sequence_is_xorshift64_and_depends_only_on_the_seed() {
        let (mut a, mut b) = (TestRng::new(1), TestRng::new(1));
        // xorshift64 (13, 7, 17) from 1.
        assert_eq!(a.next_u64(), 1_082_269_761);
        let draws: Vec<u64> = (0..100).map(|_| a.below(10)).collect();
        b.next_u64();
        assert_eq!(draws, (0..100).map(|_| b.below(10)).collect::<Vec<_>>());
        assert!(draws.iter().all(|&d| d < 10));
        assert!((0..10).all(|d| draws.contains(&d)), "every value drawn");
    }
}
