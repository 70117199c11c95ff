//! A small deterministic 64-bit hash for policies that place keys on rings or pick by
//! rendezvous: the same bits natively and in a guest, with no seed from the environment
//! (std's `RandomState` would differ between builds and runs).
//!
//! `mix64` is the SplitMix64 finaliser (Steele, Lea, Flood, "Fast splittable
//! pseudorandom number generators", OOPSLA'14): a bijection on u64 with full avalanche.

/// Scrambles `x`: a bijection on u64, every output bit depending on every input bit.
#[inline]
pub const fn mix64(x: u64) -> u64 {
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Hashes the pair (a, b). Not symmetric: `hash2(a, b) != hash2(b, a)` in general.
#[inline]
pub const fn hash2(a: u64, b: u64) -> u64 {
    // The golden-ratio increment keeps b = 0 from collapsing to mix64(a ^ 0).
    mix64(a ^ mix64(b.wrapping_add(0x9e37_79b9_7f4a_7c15)))
}

/// The identity of one (worker, dp rank) candidate as a hash.
#[inline]
pub const fn endpoint(worker_id: u64, dp_rank: u32) -> u64 {
    hash2(worker_id, dp_rank as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix64_matches_the_splitmix64_reference_outputs() {
        // SplitMix64 with seed 0: state += golden ratio, output = mix(state).
        assert_eq!(mix64(0x9e37_79b9_7f4a_7c15), 0xe220_a839_7b1d_cdaf);
        assert_eq!(mix64(0x9e37_79b9_7f4a_7c15u64.wrapping_mul(2)), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn pairs_are_ordered_and_spread() {
        assert_ne!(hash2(1, 2), hash2(2, 1));
        assert_ne!(endpoint(1, 0), endpoint(1, 1));
        assert_ne!(hash2(0, 0), 0);
    }
}
