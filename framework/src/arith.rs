//! Integer helpers shared by the layers that cut buffers into units.

/// The greatest common divisor (`gcd(0, 0)` is 1, so it can divide).
pub fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

/// The least common multiple, `None` past `usize`.
pub fn lcm(a: usize, b: usize) -> Option<usize> {
    (a / gcd(a, b)).checked_mul(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcd_and_lcm() {
        assert_eq!((gcd(12, 18), gcd(7, 0), gcd(0, 0)), (6, 7, 1));
        assert_eq!((lcm(4, 6), lcm(3, 1)), (Some(12), Some(3)));
        assert_eq!(lcm(usize::MAX, usize::MAX - 1), None);
    }
}
