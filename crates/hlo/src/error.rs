//! Errors with source positions, rendered as file:line:col diagnostics with a snippet.

use annotate_snippets::{AnnotationKind, Level, Renderer, Snippet};

/// A parse error at a byte range of the source.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ParseError {
    pub offset: usize,
    pub len: usize,
    pub message: String,
    pub hint: Option<String>,
}

impl ParseError {
    pub fn new(offset: usize, len: usize, message: impl Into<String>) -> ParseError {
        ParseError {
            offset,
            len,
            message: message.into(),
            hint: None,
        }
    }
    pub fn with_hint(mut self, hint: impl Into<String>) -> ParseError {
        self.hint = Some(hint.into());
        self
    }
    /// Renders the error as `path:line:col` plus a snippet with a caret.
    pub fn render(&self, path: &str, source: &str) -> String {
        render_diagnostic(
            path,
            source,
            self.offset,
            self.len,
            &self.message,
            self.hint.as_deref(),
        )
    }
}

/// 1-based line and column (in characters) of a byte offset.
pub fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let offset = floor_char_boundary(source, offset.min(source.len()));
    let before = &source[..offset];
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = source[line_start..offset].chars().count() + 1;
    (line, col)
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Renders an error at `offset..offset+len` of `source` for a human.
pub fn render_diagnostic(
    path: &str,
    source: &str,
    offset: usize,
    len: usize,
    message: &str,
    hint: Option<&str>,
) -> String {
    let offset = floor_char_boundary(source, offset.min(source.len()));
    let (line, _) = line_col(source, offset);
    let line_start = source[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line_end = source[offset..]
        .find('\n')
        .map_or(source.len(), |i| offset + i);
    let text = &source[line_start..line_end];
    let start = offset - line_start;
    let end = floor_char_boundary(text, (start + len.max(1)).min(text.len())).max(start);
    let snippet = Snippet::source(text)
        .line_start(line)
        .path(path)
        .fold(false)
        .annotation(AnnotationKind::Primary.span(start..end));
    let mut report = Level::ERROR.primary_title(message).element(snippet);
    if let Some(h) = hint {
        report = report.element(Level::HELP.message(h));
    }
    let groups = [report];
    Renderer::plain().render(&groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_position_and_caret() {
        let src = "HloModule m\nENTRY e {\n  x = f32[] bogus()\n}\n";
        let off = src.find("bogus").unwrap();
        let s = render_diagnostic(
            "f.hlo",
            src,
            off,
            5,
            "unknown opcode 'bogus'",
            Some("try add"),
        );
        assert!(s.contains("f.hlo:3:13"), "{s}");
        assert!(s.contains("^^^^^"), "{s}");
        assert!(s.contains("try add"), "{s}");
        // Long lines are trimmed around the error.
        let long = format!("{}bad{}", "x ".repeat(5000), " y".repeat(5000));
        let s = render_diagnostic("g.hlo", &long, 10000, 3, "m", None);
        assert!(s.contains("g.hlo:1:10001") && s.len() < 5000, "{}", s.len());
    }
}
