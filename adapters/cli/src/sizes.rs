//! Byte sizes with K/M/G suffixes, size sweeps and element counts, as nccl-tests takes
//! them, each checked against `limits::MAX_BUFFER_BYTES`.

use crate::validate::bad_flag;
use oxccl::framework::limits::MAX_BUFFER_BYTES;
use oxccl::{DataType, Error, OpKind};

/// Parse `1024`, `1K`, `64M`, `1G` (powers of 1024).
pub fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let (digits, unit) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        _ => {
            return Err(format!(
                "unknown size unit `{unit}` in `{text}` (use K, M or G)"
            ))
        }
    };
    let value: usize = digits
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a size"))?;
    value
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("`{text}` is too large"))
}

/// The size given to `flag`, at most [`MAX_BUFFER_BYTES`].
fn size_flag(flag: &'static str, text: &str) -> Result<usize, Error> {
    let beyond = || {
        format!("a rank's buffer holds at most {MAX_BUFFER_BYTES} bytes (1024G, limits::MAX_BUFFER_BYTES)")
    };
    match parse_size(text) {
        Ok(size) if size <= MAX_BUFFER_BYTES => Ok(size),
        Ok(size) => Err(bad_flag(flag, text, format!("{size} bytes: {}", beyond()))),
        Err(reason) => Err(bad_flag(flag, text, format!("{reason}; {}", beyond()))),
    }
}

/// The sizes from `-b` to `-e` (K/M/G suffixes, each at most [`MAX_BUFFER_BYTES`]),
/// multiplied by `-f` each step.
pub fn size_sweep(min: &str, max: &str, factor: usize) -> Result<Vec<usize>, Error> {
    let (low, high) = (
        size_flag("-b/--minbytes", min)?,
        size_flag("-e/--maxbytes", max)?,
    );
    if low > high {
        let reason = format!("{high} bytes is below -b ({low} bytes); need -b <= -e");
        return Err(bad_flag("-e/--maxbytes", max, reason));
    }
    if factor < 2 {
        let reason = "sizes must grow: use a factor of at least 2".to_string();
        return Err(bad_flag("-f/--stepfactor", factor, reason));
    }
    let mut out = vec![];
    let mut s = low;
    while s <= high {
        out.push(s);
        s = match s.checked_mul(factor) {
            Some(next) if next > s => next,
            _ => break,
        };
    }
    Ok(out)
}

/// nccl-tests' element count for a size: per-rank elements for AllReduce, Broadcast,
/// Reduce and send/recv; for the gathering and scattering collectives (V forms included)
/// the per-rank block, so the total is divisible by the ranks; 0 for a barrier.
pub fn count_for_size(kind: OpKind, size: usize, dtype: DataType, ranks: usize) -> usize {
    let elems = size / dtype.size();
    match kind {
        OpKind::AllReduce | OpKind::Broadcast | OpKind::Reduce | OpKind::SendRecv => elems,
        OpKind::Barrier => 0,
        _ => elems / ranks.max(1),
    }
}

/// Bytes of the larger buffer of one rank's call of `count` elements (the block per rank
/// of the gathering and scattering collectives), or `None` when that overflows.
pub fn largest_buffer_bytes(
    kind: OpKind,
    count: usize,
    dtype: DataType,
    ranks: usize,
) -> Option<usize> {
    if kind == OpKind::Barrier {
        return Some(0);
    }
    let block = count.checked_mul(dtype.size())?;
    match kind {
        OpKind::AllReduce | OpKind::Broadcast | OpKind::Reduce | OpKind::SendRecv => Some(block),
        _ => block.checked_mul(ranks),
    }
}

/// `--count` for `kind` on `ranks` ranks, refused when a rank's buffer would pass
/// [`MAX_BUFFER_BYTES`].
pub fn count_flag(
    kind: OpKind,
    count: usize,
    dtype: DataType,
    ranks: usize,
) -> Result<usize, Error> {
    match largest_buffer_bytes(kind, count, dtype, ranks) {
        Some(bytes) if bytes <= MAX_BUFFER_BYTES => Ok(count),
        found => {
            let per_element = largest_buffer_bytes(kind, 1, dtype, ranks)
                .unwrap_or(1)
                .max(1);
            let found = found.map_or("more bytes than fit in a usize".into(), |b| {
                format!("{b} bytes")
            });
            Err(bad_flag(
                "--count",
                count,
                format!(
                    "{kind} of {count} {} elements on {ranks} ranks needs a buffer of {found}, \
                     past the {MAX_BUFFER_BYTES}-byte bound on one rank's buffer \
                     (limits::MAX_BUFFER_BYTES); use at most {} elements",
                    dtype.name(),
                    MAX_BUFFER_BYTES / per_element
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes() {
        assert_eq!(parse_size("1K").unwrap(), 1024);
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("2g").unwrap(), 2 << 30);
        assert_eq!(parse_size("100").unwrap(), 100);
        assert!(parse_size("1T").is_err());
        assert!(parse_size("K").is_err());
    }

    #[test]
    fn sweeps() {
        assert_eq!(
            size_sweep("1K", "1G", 1024).unwrap(),
            vec![1 << 10, 1 << 20, 1 << 30]
        );
        assert_eq!(size_sweep("8", "8", 2).unwrap(), vec![8]);
        assert!(size_sweep("2K", "1K", 2).is_err());
        assert!(size_sweep("1K", "2K", 1).is_err());
    }

    #[test]
    fn sizes_past_the_buffer_bound_name_their_flag() {
        assert_eq!(
            size_sweep("1024G", "1024G", 2).unwrap(),
            vec![MAX_BUFFER_BYTES]
        );
        for (min, max, flag) in [
            ("1K", "1025G", "-e/--maxbytes"),
            ("2000000G", "2000000G", "-b/--minbytes"),
            ("1K", "18446744073709551615", "-e/--maxbytes"),
            ("1K", "99999999999999999999G", "-e/--maxbytes"),
        ] {
            let err = size_sweep(min, max, 2).unwrap_err().to_string();
            assert!(err.starts_with(flag), "{err}");
            assert!(err.contains("1099511627776"), "{err}");
        }
        let err = size_sweep("1K", "2K", 0).unwrap_err().to_string();
        assert!(err.starts_with("-f/--stepfactor"), "{err}");
    }

    #[test]
    fn counts_whose_buffers_overflow_or_pass_the_bound_are_refused() {
        let f32 = DataType::F32;
        assert!(count_flag(OpKind::AllReduce, 1 << 38, f32, 8).is_ok());
        for (kind, count, ranks) in [
            (OpKind::AllReduce, usize::MAX, 8),
            (OpKind::AllReduce, (1 << 38) + 1, 8),
            (OpKind::AllGather, 1 << 38, 2),
            (OpKind::AlltoAll, usize::MAX / 8, 8),
        ] {
            let err = count_flag(kind, count, f32, ranks).unwrap_err().to_string();
            assert!(err.starts_with("--count"), "{err}");
            assert!(err.contains("limits::MAX_BUFFER_BYTES"), "{err}");
        }
        assert_eq!(
            largest_buffer_bytes(OpKind::Barrier, usize::MAX, f32, 8),
            Some(0)
        );
    }
}
