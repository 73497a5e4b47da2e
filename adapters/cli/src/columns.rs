//! Text tables whose columns are as wide as their widest cell, so that long executor names
//! and constraints keep every row aligned.

/// How a column's cells sit in its width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// `rows` (the header first) as lines: each column but the last padded to its widest
/// cell as `align` says, columns two spaces apart, the last column as it is.
pub fn lines(align: &[Align], rows: &[Vec<String>]) -> Vec<String> {
    let columns = align.len();
    let mut widths = vec![0; columns];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                if i + 1 == columns {
                    line.push_str(cell);
                    continue;
                }
                let pad = " ".repeat(widths[i] - cell.chars().count());
                match align[i] {
                    Align::Left => line.extend([cell.as_str(), &pad]),
                    Align::Right => line.extend([pad.as_str(), cell]),
                }
            }
            line
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cells: &[&str]) -> Vec<String> {
        cells.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn columns_take_the_width_of_their_widest_cell() {
        let rows = [
            row(&["name", "pref", "description"]),
            row(&["relay-mesh-single", "1", "one relay"]),
            row(&["ring", "10", "a ring"]),
        ];
        let out = lines(&[Align::Left, Align::Right, Align::Left], &rows);
        assert_eq!(
            out,
            [
                "name               pref  description",
                "relay-mesh-single     1  one relay",
                "ring                 10  a ring",
            ]
        );
    }
}
