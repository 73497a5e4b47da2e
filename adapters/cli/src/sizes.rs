//! Byte sizes with K/M/G suffixes, as nccl-tests takes them.

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
}
