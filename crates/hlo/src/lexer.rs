//! Byte-level lexer for HLO text (HLO_GRAMMAR §1). Tokens borrow from the source;
//! only strings with escapes allocate.

use std::borrow::Cow;

/// A string token as written between the quotes; escapes are undone on demand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawStr<'a> {
    pub raw: &'a str,
    pub has_escapes: bool,
}

impl<'a> RawStr<'a> {
    /// The string's value with C escapes undone.
    pub fn value(&self) -> Result<Cow<'a, str>, String> {
        if self.has_escapes {
            unescape_c(self.raw).map(Cow::Owned)
        } else {
            Ok(Cow::Borrowed(self.raw))
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tok<'a> {
    Eof,
    Eq,
    Comma,
    Colon,
    Star,
    Hash,
    Plus,
    Tilde,
    LBracket,
    RBracket,
    LBrace,
    RBrace,
    LParen,
    RParen,
    Ellipsis,
    Arrow,
    Leq,
    Question,
    /// `%name`, or `ident:` (colon consumed).
    Name(&'a str),
    /// `ident=` (equals consumed).
    AttrName(&'a str),
    Ident(&'a str),
    /// `-?[0-9]+` that fits in an i64.
    Int(i64),
    /// An integer above i64::MAX (u64 literals are kept as bit patterns).
    UInt64(u64),
    Decimal(f64),
    NegInf,
    Str(RawStr<'a>),
    DimLabels(&'a str),
    /// `3x3`, `1x2x2x1`.
    Dxd(&'a str),
    /// `0_1x-1_2`, `0_0_1`.
    Pad(&'a str),
    /// A lexing error with its message.
    Error(&'static str),
}

impl Tok<'_> {
    /// A short description for "expected X, found Y" messages.
    pub fn describe(&self) -> String {
        match self {
            Tok::Eof => "end of input".into(),
            Tok::Name(n) => format!("name '%{n}'"),
            Tok::AttrName(n) => format!("attribute '{n}='"),
            Tok::Ident(n) => format!("'{n}'"),
            Tok::Int(v) => format!("integer {v}"),
            Tok::UInt64(v) => format!("integer {v}"),
            Tok::Decimal(v) => format!("number {v}"),
            Tok::Str(_) => "a string".into(),
            Tok::DimLabels(s) | Tok::Dxd(s) | Tok::Pad(s) => format!("'{s}'"),
            Tok::Error(e) => e.to_string(),
            other => format!("'{}'", punct_text(other)),
        }
    }
}

fn punct_text(t: &Tok) -> &'static str {
    match t {
        Tok::Eq => "=",
        Tok::Comma => ",",
        Tok::Colon => ":",
        Tok::Star => "*",
        Tok::Hash => "#",
        Tok::Plus => "+",
        Tok::Tilde => "~",
        Tok::LBracket => "[",
        Tok::RBracket => "]",
        Tok::LBrace => "{",
        Tok::RBrace => "}",
        Tok::LParen => "(",
        Tok::RParen => ")",
        Tok::Ellipsis => "...",
        Tok::Arrow => "->",
        Tok::Leq => "<=",
        Tok::Question => "?",
        Tok::NegInf => "-inf",
        _ => "?",
    }
}

/// A token with its byte span in the source.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Token<'a> {
    pub tok: Tok<'a>,
    pub start: usize,
    pub end: usize,
}

pub struct Lexer<'a> {
    src: &'a [u8],
    text: &'a str,
    pos: usize,
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

/// `[A-Za-z0-9_.-]`, as a table: identifier scanning is the lexer's hottest loop.
static IDENT_CHAR: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        t[c] = b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-';
        c += 1;
    }
    t
};

fn is_ident_char(c: u8) -> bool {
    IDENT_CHAR[c as usize]
}

impl<'a> Lexer<'a> {
    pub fn new(text: &'a str) -> Lexer<'a> {
        Lexer {
            src: text.as_bytes(),
            text,
            pos: 0,
        }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Moves the cursor back (or forward) to a byte offset, e.g. to re-read raw text.
    pub fn reset_to(&mut self, pos: usize) {
        self.pos = pos.min(self.src.len());
    }

    pub fn source(&self) -> &'a str {
        self.text
    }

    fn peek_byte(&self, off: usize) -> u8 {
        self.src.get(self.pos + off).copied().unwrap_or(0)
    }

    /// Skips whitespace and comments. Returns an error for an unterminated block comment.
    pub fn skip_trivia(&mut self) -> Result<(), &'static str> {
        loop {
            match self.peek_byte(0) {
                b' ' | b'\t' | b'\n' | b'\r' => self.pos += 1,
                b'/' if self.peek_byte(1) == b'*' => match find(&self.src[self.pos + 2..], b"*/") {
                    Some(i) => self.pos += 2 + i + 2,
                    None => return Err("unterminated /* comment"),
                },
                b'/' if self.peek_byte(1) == b'/' => {
                    match self.src[self.pos..].iter().position(|&c| c == b'\n') {
                        Some(i) => self.pos += i + 1,
                        None => self.pos = self.src.len(),
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    /// Lexes the next token.
    pub fn next_token(&mut self) -> Token<'a> {
        // Fast path over plain whitespace; comments take the slow path.
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.src.get(self.pos) {
            self.pos += 1;
        }
        if self.src.get(self.pos) == Some(&b'/') {
            if let Err(msg) = self.skip_trivia() {
                let start = self.pos;
                self.pos = self.src.len();
                return Token {
                    tok: Tok::Error(msg),
                    start,
                    end: self.src.len(),
                };
            }
        }
        let start = self.pos;
        let tok = self.lex_at(start);
        if self.pos == start && tok != Tok::Eof {
            // Never stall: every token consumes at least one byte.
            self.pos += 1;
        }
        Token {
            tok,
            start,
            end: self.pos,
        }
    }

    fn lex_at(&mut self, start: usize) -> Tok<'a> {
        let Some(&c) = self.src.get(start) else {
            return Tok::Eof;
        };
        let single = |lx: &mut Self, t: Tok<'a>| {
            lx.pos += 1;
            t
        };
        match c {
            b'=' => single(self, Tok::Eq),
            b',' => single(self, Tok::Comma),
            b':' => single(self, Tok::Colon),
            b'*' => single(self, Tok::Star),
            b'#' => single(self, Tok::Hash),
            b'+' => single(self, Tok::Plus),
            b'~' => single(self, Tok::Tilde),
            b'[' => single(self, Tok::LBracket),
            b']' => single(self, Tok::RBracket),
            b'{' => single(self, Tok::LBrace),
            b'}' => single(self, Tok::RBrace),
            b'(' => single(self, Tok::LParen),
            b')' => single(self, Tok::RParen),
            b'<' if self.peek_byte(1) == b'=' => {
                self.pos += 2;
                Tok::Leq
            }
            b'.' if self.src[start..].starts_with(b"...") => {
                self.pos += 3;
                Tok::Ellipsis
            }
            b'"' => self.lex_string(),
            b'%' => self.lex_percent_name(),
            b'?' => self
                .lex_number_like()
                .unwrap_or_else(|| single(self, Tok::Question)),
            b'-' if self.peek_byte(1) == b'>' => {
                self.pos += 2;
                Tok::Arrow
            }
            b'0'..=b'9' | b'-' | b'.' => self.lex_number_like().unwrap_or_else(|| {
                self.pos += 1;
                Tok::Error("unexpected character")
            }),
            c if is_ident_start(c) => self.lex_identifier(),
            0 => single(self, Tok::Error("NUL byte in input")),
            _ => {
                let ch = self.text[start..].chars().next().unwrap_or('?');
                self.pos += ch.len_utf8().max(1);
                Tok::Error("unexpected character")
            }
        }
    }

    fn lex_percent_name(&mut self) -> Tok<'a> {
        let start = self.pos + 1;
        let mut end = start;
        while end < self.src.len() && is_ident_char(self.src[end]) {
            end += 1;
        }
        self.pos = end;
        if end == start {
            return Tok::Error("expected a name after '%'");
        }
        Tok::Name(&self.text[start..end])
    }

    fn lex_identifier(&mut self) -> Tok<'a> {
        let start = self.pos;
        if let Some(end) = match_dim_labels(self.src, start) {
            self.pos = end;
            return Tok::DimLabels(&self.text[start..end]);
        }
        let mut end = start;
        while end < self.src.len() && is_ident_char(self.src[end]) {
            end += 1;
        }
        let ident = &self.text[start..end];
        self.pos = end;
        match self.src.get(end) {
            Some(b':') => {
                self.pos += 1;
                return Tok::Name(ident);
            }
            Some(b'=') if self.src.get(end + 1) != Some(&b'=') => {
                self.pos += 1;
                return Tok::AttrName(ident);
            }
            _ => {}
        }
        if ident == "nan" {
            return self.lex_nan_payload(false);
        }
        Tok::Ident(ident)
    }

    /// After `nan` or `-nan`: an optional `(0x<hex>)` payload.
    fn lex_nan_payload(&mut self, negative: bool) -> Tok<'a> {
        let mut bits = f64::NAN.to_bits() & !(1u64 << 63);
        if self.src[self.pos..].starts_with(b"(0x") {
            let digits_start = self.pos + 3;
            let mut end = digits_start;
            while end < self.src.len() && self.src[end].is_ascii_hexdigit() {
                end += 1;
            }
            if self.src.get(end) == Some(&b')') && end > digits_start {
                let payload = u64::from_str_radix(&self.text[digits_start..end], 16).unwrap_or(1);
                let mantissa_mask = (1u64 << 52) - 1;
                bits = (0x7ffu64 << 52) | (payload & mantissa_mask).max(1);
                self.pos = end + 1;
            }
        }
        let v = f64::from_bits(bits);
        Tok::Decimal(if negative { -v } else { v })
    }

    /// Tokens that start with a digit, `-`, `.` or `?`, in XLA's priority order:
    /// decimal, dim_labels, DxD, pad, int, `-inf`, `-nan`.
    fn lex_number_like(&mut self) -> Option<Tok<'a>> {
        let start = self.pos;
        let s = self.src;
        // Fast path: a plain integer followed by a delimiter is by far the most
        // common token starting with a digit.
        let digits_start = start + usize::from(s.get(start) == Some(&b'-'));
        let end = digits(s, digits_start);
        if end > digits_start
            && end - digits_start < 19
            && !s
                .get(end)
                .is_some_and(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'?'))
        {
            self.pos = end;
            // At most 18 digits: cannot overflow.
            let magnitude = s[digits_start..end]
                .iter()
                .fold(0i64, |acc, &d| acc * 10 + i64::from(d - b'0'));
            return Some(Tok::Int(if digits_start > start {
                -magnitude
            } else {
                magnitude
            }));
        }
        if let Some(end) = match_decimal(s, start) {
            self.pos = end;
            let text = &self.text[start..end];
            return Some(match text.parse::<f64>() {
                Ok(v) => Tok::Decimal(v),
                Err(_) => Tok::Error("malformed number"),
            });
        }
        if let Some(end) = match_dim_labels(s, start) {
            self.pos = end;
            return Some(Tok::DimLabels(&self.text[start..end]));
        }
        if let Some(end) = match_dxd(s, start) {
            self.pos = end;
            return Some(Tok::Dxd(&self.text[start..end]));
        }
        if let Some(end) = match_pad(s, start) {
            self.pos = end;
            return Some(Tok::Pad(&self.text[start..end]));
        }
        if let Some(end) = match_int(s, start) {
            self.pos = end;
            let text = &self.text[start..end];
            return Some(match text.parse::<i128>() {
                Ok(v) if i64::try_from(v).is_ok() => Tok::Int(v as i64),
                Ok(v) if (0..=u64::MAX as i128).contains(&v) => Tok::UInt64(v as u64),
                _ => Tok::Error("integer does not fit in 64 bits"),
            });
        }
        if s[start..].starts_with(b"-inf") && !s.get(start + 4).is_some_and(|&c| is_ident_char(c)) {
            self.pos = start + 4;
            return Some(Tok::NegInf);
        }
        if s[start..].starts_with(b"-nan") && !s.get(start + 4).is_some_and(|&c| is_ident_char(c)) {
            self.pos = start + 4;
            return Some(self.lex_nan_payload(true));
        }
        None
    }

    fn lex_string(&mut self) -> Tok<'a> {
        let start = self.pos + 1;
        let mut i = start;
        let mut has_escape = false;
        while i < self.src.len() {
            match self.src[i] {
                b'"' => {
                    self.pos = i + 1;
                    let raw = &self.text[start..i];
                    return Tok::Str(RawStr {
                        raw,
                        has_escapes: has_escape,
                    });
                }
                b'\\' => {
                    has_escape = true;
                    i += 2;
                }
                _ => i += 1,
            }
        }
        self.pos = self.src.len();
        Tok::Error("unterminated string")
    }

    /// From an opening `{`, `[` or `(` at the cursor, returns the balanced text
    /// (brackets counted outside double-quoted strings) and moves past it.
    pub fn scan_balanced(&mut self, max_len: usize) -> Result<&'a str, &'static str> {
        let start = self.pos;
        let mut depth: usize = 0;
        let mut i = start;
        while i < self.src.len() {
            match self.src[i] {
                b'{' | b'[' | b'(' => depth += 1,
                b'}' | b']' | b')' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        self.pos = i + 1;
                        return Ok(&self.text[start..i + 1]);
                    }
                }
                b'"' => {
                    i += 1;
                    while i < self.src.len() && self.src[i] != b'"' {
                        if self.src[i] == b'\\' {
                            i += 1;
                        }
                        i += 1;
                    }
                }
                0 => return Err("NUL byte in input"),
                _ => {}
            }
            if i - start > max_len {
                return Err("bracketed value is too long");
            }
            i += 1;
        }
        Err("unbalanced brackets: missing closing bracket")
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn digits(s: &[u8], i: usize) -> usize {
    let mut j = i;
    while j < s.len() && s[j].is_ascii_digit() {
        j += 1;
    }
    j
}

/// Is the byte at `i` a character that would continue an identifier-ish token?
fn continues_word(s: &[u8], i: usize) -> bool {
    s.get(i)
        .is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_')
}

fn match_decimal(s: &[u8], start: usize) -> Option<usize> {
    let mut i = start;
    if s.get(i) == Some(&b'-') {
        i += 1;
    }
    let int_end = digits(s, i);
    let mut j = int_end;
    let mut has_frac = false;
    if s.get(j) == Some(&b'.') && !s[j..].starts_with(b"...") {
        let frac_end = digits(s, j + 1);
        if int_end > i || frac_end > j + 1 {
            has_frac = true;
            j = frac_end;
        }
    }
    if int_end == i && !has_frac {
        return None;
    }
    if matches!(s.get(j), Some(b'e' | b'E')) {
        let mut k = j + 1;
        if matches!(s.get(k), Some(b'+' | b'-')) {
            k += 1;
        }
        let exp_end = digits(s, k);
        if exp_end > k {
            return Some(exp_end);
        }
    }
    has_frac.then_some(j)
}

fn match_label_part(s: &[u8], i: usize, allowed: &[u8]) -> usize {
    let mut j = i;
    while j < s.len() && (s[j].is_ascii_digit() || s[j] == b'?' || allowed.contains(&s[j])) {
        j += 1;
    }
    j
}

/// `[0-9bf?]{2,}_[0-9io?]{2,}->[0-9bf?]{2,}`
fn match_dim_labels(s: &[u8], start: usize) -> Option<usize> {
    let a = match_label_part(s, start, b"bf");
    if a - start < 2 || s.get(a) != Some(&b'_') {
        return None;
    }
    let b = match_label_part(s, a + 1, b"io");
    if b - (a + 1) < 2 || !s[b..].starts_with(b"->") {
        return None;
    }
    let c = match_label_part(s, b + 2, b"bf");
    (c - (b + 2) >= 2).then_some(c)
}

/// `[0-9]+(x[0-9]+)+`
fn match_dxd(s: &[u8], start: usize) -> Option<usize> {
    let mut j = digits(s, start);
    if j == start {
        return None;
    }
    let mut parts = 1;
    while s.get(j) == Some(&b'x') {
        let k = digits(s, j + 1);
        if k == j + 1 {
            break;
        }
        j = k;
        parts += 1;
    }
    (parts > 1 && !continues_word(s, j)).then_some(j)
}

fn match_signed(s: &[u8], i: usize) -> Option<usize> {
    let k = if s.get(i) == Some(&b'-') { i + 1 } else { i };
    let e = digits(s, k);
    (e > k).then_some(e)
}

/// `-?N_-?N(_N)?(x-?N_-?N(_N)?)*`
fn match_pad(s: &[u8], start: usize) -> Option<usize> {
    let one = |i: usize| -> Option<usize> {
        let a = match_signed(s, i)?;
        if s.get(a) != Some(&b'_') {
            return None;
        }
        let b = match_signed(s, a + 1)?;
        if s.get(b) == Some(&b'_') {
            if let Some(c) = match_signed(s, b + 1) {
                return Some(c);
            }
        }
        Some(b)
    };
    let mut j = one(start)?;
    while s.get(j) == Some(&b'x') {
        match one(j + 1) {
            Some(k) => j = k,
            None => break,
        }
    }
    (!continues_word(s, j)).then_some(j)
}

fn match_int(s: &[u8], start: usize) -> Option<usize> {
    match_signed(s, start)
}

/// Undoes C escapes: `\" \\ \n \t \' \xHH \NNN` and friends.
pub fn unescape_c(raw: &str) -> Result<String, String> {
    let b = raw.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let Some(&e) = b.get(i + 1) else {
            return Err("string ends with a lone backslash".into());
        };
        i += 2;
        match e {
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'r' => out.push(b'\r'),
            b'a' => out.push(7),
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'v' => out.push(11),
            b'\\' | b'"' | b'\'' | b'?' => out.push(e),
            b'x' => {
                let mut v: u32 = 0;
                let mut n = 0;
                while n < 2 && i < b.len() && b[i].is_ascii_hexdigit() {
                    v = v * 16 + (b[i] as char).to_digit(16).unwrap_or(0);
                    i += 1;
                    n += 1;
                }
                if n == 0 {
                    return Err("\\x escape without hex digits".into());
                }
                out.push(v as u8);
            }
            b'0'..=b'7' => {
                let mut v: u32 = (e - b'0') as u32;
                let mut n = 1;
                while n < 3 && i < b.len() && (b'0'..=b'7').contains(&b[i]) {
                    v = v * 8 + (b[i] - b'0') as u32;
                    i += 1;
                    n += 1;
                }
                out.push(v as u8);
            }
            other if other.is_ascii_graphic() => {
                return Err(format!("unknown escape '\\{}' in string", other as char))
            }
            // Keep control bytes and partial UTF-8 out of the message.
            other => {
                return Err(format!(
                    "unknown escape in string: '\\' followed by byte 0x{other:02x}"
                ))
            }
        }
    }
    String::from_utf8(out).map_err(|_| "string is not valid UTF-8 after unescaping".into())
}

/// Escapes a string the way XLA's CEscape does, for printing.
pub fn escape_c(s: &str, out: &mut String) {
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\'' => out.push_str("\\'"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\{:03o}", c as u32));
            }
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok<'_>> {
        let mut lx = Lexer::new(s);
        let mut v = Vec::new();
        loop {
            let t = lx.next_token();
            if t.tok == Tok::Eof {
                return v;
            }
            v.push(t.tok);
        }
    }

    #[test]
    fn lexes_special_tokens() {
        assert_eq!(
            toks("b01f_01io->b01f 3x3 0_1x-1_2 1e5 -inf 1 0_0"),
            vec![
                Tok::DimLabels("b01f_01io->b01f"),
                Tok::Dxd("3x3"),
                Tok::Pad("0_1x-1_2"),
                Tok::Decimal(1e5),
                Tok::NegInf,
                Tok::Int(1),
                Tok::Pad("0_0"),
            ]
        );
    }

    #[test]
    fn nan_payloads() {
        for (text, neg) in [("nan", false), ("-nan", true), ("nan(0x1)", false)] {
            match &toks(text)[..] {
                [Tok::Decimal(v)] => assert!(v.is_nan() && v.is_sign_negative() == neg),
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn names_and_attr_names() {
        assert_eq!(
            toks("%a.1 = add(x, y), dimensions={0} /*c*/ p0: // x\n"),
            vec![
                Tok::Name("a.1"),
                Tok::Eq,
                Tok::Ident("add"),
                Tok::LParen,
                Tok::Ident("x"),
                Tok::Comma,
                Tok::Ident("y"),
                Tok::RParen,
                Tok::Comma,
                Tok::AttrName("dimensions"),
                Tok::LBrace,
                Tok::Int(0),
                Tok::RBrace,
                Tok::Name("p0"),
            ]
        );
    }

    #[test]
    fn strings_unescape() {
        assert_eq!(
            toks(r#""a\"b\n""#),
            vec![Tok::Str(RawStr {
                raw: "a\\\"b\\n",
                has_escapes: true
            })]
        );
        assert!(matches!(toks("\"abc")[0], Tok::Error(_)));
    }
}
