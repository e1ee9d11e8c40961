//! Plain-text tables for the operator commands (`dlq`, `inbox-dlq`, `status`).

/// A row of cells from string slices.
pub(crate) fn cells<const N: usize>(c: [&str; N]) -> Vec<String> {
    c.iter().map(|s| s.to_string()).collect()
}

/// One line, at most `max` characters: control characters become spaces.
pub(crate) fn clip(s: &str, max: usize) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        flat
    } else {
        let mut out: String = flat.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// Left-aligned columns, two spaces apart; the first row is the header.
pub(crate) fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width: Vec<usize> = (0..cols)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(c);
            } else {
                line.push_str(c);
                line.push_str(&" ".repeat(width[i] - c.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_flattens_and_truncates() {
        assert_eq!(clip("a\nb", 10), "a b");
        assert_eq!(clip("abcdef", 4), "abc…");
    }

    #[test]
    fn columns_line_up_and_lines_end_without_spaces() {
        let t = table(&[cells(["id", "topic", ""]), cells(["12345", "t", ""])]);
        assert_eq!(t, "id     topic\n12345  t\n");
    }
}
