//! Byte sizes with K/M/G suffixes and size sweeps, as nccl-tests takes them.

use oxccl::{DataType, OpKind};

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

/// The sizes from `min` to `max` (K/M/G suffixes), multiplied by `factor` each step.
pub fn size_sweep(min: &str, max: &str, factor: usize) -> Result<Vec<usize>, String> {
    let (min, max) = (parse_size(min)?, parse_size(max)?);
    if min > max || factor < 2 {
        return Err(format!(
            "need -b <= -e and -f >= 2 (got {min}, {max}, {factor})"
        ));
    }
    let mut out = vec![];
    let mut s = min;
    while s <= max {
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
        _ => elems / ranks,
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
}
