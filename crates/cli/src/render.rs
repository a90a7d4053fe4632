//! Small helpers for human-readable output: byte sizes and tables.

use comfy_table::{presets::UTF8_FULL_CONDENSED, ContentArrangement, Table};

/// `1536` -> `1.5 KiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// The most characters a table cell shows: a longer text (a generated op
/// name can be megabytes) keeps its start and end around an ellipsis, so
/// laying out a table stays linear in its input (the full text is in the
/// JSON output).
pub const MAX_CELL_CHARS: usize = 120;

/// `text`, or its first and last characters around `…` when it is longer
/// than [`MAX_CELL_CHARS`].
pub fn clip(text: &str) -> String {
    let n = text.chars().count();
    if n <= MAX_CELL_CHARS {
        return text.to_string();
    }
    let head_len = (MAX_CELL_CHARS - 1) / 2;
    let tail_len = MAX_CELL_CHARS - 1 - head_len;
    let head: String = text.chars().take(head_len).collect();
    let tail: String = text.chars().skip(n - tail_len).collect();
    format!("{head}…{tail}")
}

/// Adds a row of cells, each clipped by [`clip`].
pub fn add_row<S: AsRef<str>>(t: &mut Table, cells: impl IntoIterator<Item = S>) {
    t.add_row(
        cells
            .into_iter()
            .map(|c| clip(c.as_ref()))
            .collect::<Vec<_>>(),
    );
}

/// A table with a header row, in the project's house style.
pub fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.to_vec());
    t
}

/// `0.00123` -> `1.230 ms`.
pub fn seconds(s: f64) -> String {
    let (v, unit) = if s >= 1.0 {
        (s, "s")
    } else if s >= 1e-3 {
        (s * 1e3, "ms")
    } else if s >= 1e-6 {
        (s * 1e6, "µs")
    } else {
        (s * 1e9, "ns")
    };
    format!("{v:.3} {unit}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_bytes() {
        assert_eq!(super::bytes(12), "12 B");
        assert_eq!(super::bytes(1536), "1.5 KiB");
        assert_eq!(super::bytes(3 << 30), "3.0 GiB");
    }

    #[test]
    fn clips_long_cells_around_an_ellipsis() {
        assert_eq!(super::clip("short"), "short");
        let long = format!("{}{}", "a".repeat(1000), "é".repeat(1000));
        let c = super::clip(&long);
        assert_eq!(c.chars().count(), super::MAX_CELL_CHARS);
        assert!(c.starts_with("aaa") && c.ends_with("éé") && c.contains('…'));
    }
}
