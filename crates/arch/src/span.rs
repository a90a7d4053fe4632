//! Mapping between dotted field paths and positions in a chip file, so that
//! every error can name both the field and its `line:col`.

use std::ops::Range;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use crate::error::Location;

/// 1-based line and character column of byte `offset` in `text`.
pub(crate) fn location(text: &str, offset: usize) -> Location {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    Location {
        line: before.matches('\n').count() + 1,
        column: before[line_start..].chars().count() + 1,
    }
}

/// Byte span of the value at `path` (e.g. `["memory", "hbm_bytes"]`).
/// Falls back to the deepest table on the way that exists; `None` when the
/// text does not parse or not even the first key exists.
pub(crate) fn value_span(text: &str, path: &[&str]) -> Option<Range<usize>> {
    let root = DeTable::parse(text).ok()?;
    let mut table: &DeTable<'_> = root.get_ref();
    let mut found = None;
    for name in path {
        let (_, value) = table.iter().find(|(k, _)| k.get_ref().as_ref() == *name)?;
        found = Some(value.span());
        match value.get_ref() {
            DeValue::Table(inner) => table = inner,
            _ => break,
        }
    }
    found
}

/// Dotted path of the innermost key whose key or value span contains the
/// whole of `target` (an error span). `None` when the text is not valid TOML
/// (a syntax error is about text, not about a field) or no key contains it
/// (e.g. a field missing from the top-level table).
pub(crate) fn key_path_containing(text: &str, target: Range<usize>) -> Option<String> {
    let root = DeTable::parse(text).ok()?;
    let mut path = Vec::new();
    walk(root.get_ref(), &target, &mut path).then(|| path.join("."))
}

/// Depth-first: a match inside a sub-table wins over the table's own key,
/// because header tables (`[memory]`) have spans that do not cover their body.
fn walk(table: &DeTable<'_>, target: &Range<usize>, path: &mut Vec<String>) -> bool {
    for (key, value) in table.iter() {
        path.push(key.get_ref().to_string());
        if let DeValue::Table(inner) = value.get_ref() {
            if walk(inner, target, path) {
                return true;
            }
        }
        if contains(key, target) || contains(value, target) {
            return true;
        }
        path.pop();
    }
    false
}

fn contains<T>(item: &Spanned<T>, target: &Range<usize>) -> bool {
    let span = item.span();
    span.start <= target.start && target.end <= span.end
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "a = 1\n[memory]\nhbm_bytes = \"x\"\n\n[ici.topology]\nkind = \"torus\"\n";

    #[test]
    fn location_is_one_based() {
        assert_eq!(location(DOC, 0), Location { line: 1, column: 1 });
        let at = DOC.find("\"x\"").unwrap();
        assert_eq!(
            location(DOC, at),
            Location {
                line: 3,
                column: 13
            }
        );
    }

    #[test]
    fn value_span_finds_nested_keys() {
        let span = value_span(DOC, &["memory", "hbm_bytes"]).unwrap();
        assert_eq!(&DOC[span], "\"x\"");
        let span = value_span(DOC, &["ici", "topology", "kind"]).unwrap();
        assert_eq!(&DOC[span], "\"torus\"");
        assert!(value_span(DOC, &["nope"]).is_none());
    }

    #[test]
    fn key_path_names_the_innermost_key() {
        let at = DOC.find("\"x\"").unwrap();
        let path = key_path_containing(DOC, at..at + 3);
        assert_eq!(path.as_deref(), Some("memory.hbm_bytes"));
        let at = DOC.find("\"torus\"").unwrap();
        let path = key_path_containing(DOC, at..at + 7);
        assert_eq!(path.as_deref(), Some("ici.topology.kind"));
        assert_eq!(key_path_containing(DOC, 0..DOC.len()), None);
        assert_eq!(key_path_containing("a = [", 4..5), None);
    }
}
