//! Splitting an element range into nearly equal chunks.

/// `parts` contiguous chunks covering `count` elements of `elem_size` bytes: the first
/// `count % parts` chunks hold one element more. Returned as `(byte offset, byte length)`.
pub fn even_chunks(count: usize, parts: usize, elem_size: usize) -> Vec<(usize, usize)> {
    assert!(parts > 0, "cannot split into zero chunks");
    let (base, extra) = (count / parts, count % parts);
    let mut offset = 0;
    (0..parts)
        .map(|i| {
            let len = (base + usize::from(i < extra)) * elem_size;
            let chunk = (offset, len);
            offset += len;
            chunk
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_range_exactly() {
        for count in [0, 1, 7, 8, 9, 1001] {
            for parts in 1..10 {
                let c = even_chunks(count, parts, 4);
                assert_eq!(c.len(), parts);
                assert_eq!(c.iter().map(|x| x.1).sum::<usize>(), count * 4);
                for w in c.windows(2) {
                    assert_eq!(w[0].0 + w[0].1, w[1].0);
                    assert!(w[0].1 >= w[1].1 && w[0].1 - w[1].1 <= 4);
                }
            }
        }
    }
}
