//! Shapes and layouts (HLO_GRAMMAR §2).

use super::*;

impl<'a> Parser<'a> {
    pub(super) fn at_shape_start(&mut self) -> bool {
        match self.tok.tok {
            Tok::LParen => true,
            // `b(` opens a buffer shape; a bare `b` is a name.
            Tok::Ident("b") => self.peek_next().tok == Tok::LParen,
            Tok::Ident(s) => PrimitiveType::from_name(s).is_some(),
            _ => false,
        }
    }

    /// The token after the current one, without consuming anything.
    pub(super) fn peek_next(&mut self) -> Token<'a> {
        if let Some(p) = &mut self.pipe {
            return p.peek();
        }
        let save = self.lex.pos();
        let next = self.lex.next_token();
        self.lex.reset_to(save);
        next
    }

    pub(super) fn shape(&mut self) -> PResult<Shape> {
        self.enter()?;
        let r = self.shape_inner();
        self.leave();
        r
    }

    pub(super) fn shape_inner(&mut self) -> PResult<Shape> {
        match self.tok.tok {
            Tok::LParen => {
                self.bump();
                let mut elems = Vec::new();
                if !self.eat(Tok::RParen) {
                    loop {
                        elems.push(self.shape()?);
                        if self.eat(Tok::RParen) {
                            break;
                        }
                        self.expect(Tok::Comma, "',' or ')' in tuple shape")?;
                    }
                }
                Ok(Shape::Tuple(elems))
            }
            Tok::Ident("b") => {
                self.bump();
                self.expect(Tok::LParen, "'(' after 'b'")?;
                let inner = self.shape()?;
                self.expect(Tok::RParen, "')'")?;
                Ok(Shape::Buffer(Box::new(inner)))
            }
            Tok::Ident(s) => match PrimitiveType::from_name(s) {
                Some(ty) => {
                    let t = self.bump();
                    self.array_shape(ty, t)
                }
                None => Err(self.expected("a shape")),
            },
            _ => Err(self.expected("a shape")),
        }
    }

    pub(super) fn array_shape(&mut self, ty: PrimitiveType, type_tok: Token<'a>) -> PResult<Shape> {
        self.expect(Tok::LBracket, "'[' after element type")?;
        let mut dims = Vec::new();
        let mut dynamic = Vec::new();
        if !self.eat(Tok::RBracket) {
            loop {
                let dim_tok = self.tok;
                let (d, dy) = match self.tok.tok {
                    Tok::Question => {
                        self.bump();
                        (UNBOUNDED_DIM, true)
                    }
                    Tok::Leq => {
                        self.bump();
                        (self.int()?, true)
                    }
                    _ => (self.int()?, false),
                };
                if d < 0 && d != UNBOUNDED_DIM {
                    return Err(self.err_at(&dim_tok, format!("negative dimension size {d}")));
                }
                dims.push(d);
                dynamic.push(dy);
                if self.eat(Tok::RBracket) {
                    break;
                }
                self.expect(Tok::Comma, "',' or ']' in dimensions")?;
            }
        }
        if !dynamic.iter().any(|&d| d) {
            dynamic.clear();
        }
        let bytes = dims
            .iter()
            .filter(|&&d| d != UNBOUNDED_DIM)
            .try_fold(ty.bit_width().max(8) as i128 / 8, |acc, &d| {
                acc.checked_mul(d as i128).filter(|&b| b <= MAX_SHAPE_BYTES)
            });
        if bytes.is_none() {
            let dims: Vec<String> = dims.iter().map(i64::to_string).collect();
            return Err(self
                .err_at(
                    &type_tok,
                    format!(
                        "shape {ty}[{}] is too large: its size in bytes does not fit in 64 bits",
                        dims.join(",")
                    ),
                )
                .with_hint("check the dimension sizes"));
        }
        let layout = if matches!(self.tok.tok, Tok::LBrace) && self.layout_follows() {
            Some(self.layout(dims.len(), &type_tok)?)
        } else {
            None
        };
        Ok(Shape::Array(ArrayShape {
            ty,
            dims,
            dynamic,
            layout,
        }))
    }

    /// After a shape, `{` starts a layout only if the next token is an int or `:`.
    pub(super) fn layout_follows(&mut self) -> bool {
        // Cheap byte-level look: `{` then a digit, `:` or `}` (no comment between).
        let rest = self
            .lex
            .source()
            .as_bytes()
            .get(self.tok.end..)
            .unwrap_or(&[]);
        if let Some(&b) = rest.iter().find(|b| !b.is_ascii_whitespace()) {
            if b.is_ascii_digit() || b == b':' || b == b'}' {
                return true;
            }
            if b != b'/' {
                return false;
            }
        }
        let next = self.peek_next();
        // `{}` is the (empty) layout of a scalar: a computation body is never empty.
        matches!(next.tok, Tok::Int(_) | Tok::Colon | Tok::RBrace)
    }

    pub(super) fn layout(&mut self, rank: usize, type_tok: &Token<'a>) -> PResult<Layout> {
        let open = self.expect(Tok::LBrace, "'{'")?;
        let minor_to_major = if matches!(self.tok.tok, Tok::Colon) {
            Vec::new()
        } else {
            self.int_list_until(Tok::RBrace)?
        };
        let mut l = Layout {
            minor_to_major,
            ..Layout::default()
        };
        if l.minor_to_major.len() != rank {
            let _ = type_tok;
            let mut e = self.err_at(
                &open,
                format!(
                    "layout lists {} dimension(s) but the shape has rank {rank}",
                    l.minor_to_major.len()
                ),
            );
            if (1..=8).contains(&rank) {
                let dims: Vec<String> = (0..rank).rev().map(|d| d.to_string()).collect();
                e = e.with_hint(format!(
                    "list every dimension once, minor to major, e.g. {{{}}}",
                    dims.join(",")
                ));
            }
            return Err(e);
        }
        if self.eat(Tok::Colon) {
            self.layout_attrs(&mut l)?;
        }
        self.expect(Tok::RBrace, "'}' to close the layout")?;
        Ok(l)
    }

    pub(super) fn layout_attrs(&mut self, l: &mut Layout) -> PResult<()> {
        loop {
            match self.tok.tok {
                Tok::Ident("D") => {
                    self.bump();
                    l.attrs.get_or_insert_with(Default::default).dim_level_types =
                        Some(self.dim_level_types()?);
                }
                Tok::Ident("T") => {
                    self.bump();
                    while matches!(self.tok.tok, Tok::LParen) {
                        self.bump();
                        let mut tile = Vec::new();
                        while !matches!(self.tok.tok, Tok::RParen) {
                            if self.eat(Tok::Star) {
                                tile.push(COMBINE_DIM);
                            } else {
                                tile.push(self.int()?);
                            }
                            if !self.eat(Tok::Comma) {
                                break;
                            }
                        }
                        self.expect(Tok::RParen, "')' to close a tile")?;
                        l.tiles.push(tile);
                    }
                }
                Tok::Ident("L") => {
                    l.attrs
                        .get_or_insert_with(Default::default)
                        .tail_padding_alignment = Some(self.layout_int_part()?)
                }
                Tok::Hash => {
                    l.attrs.get_or_insert_with(Default::default).index_type =
                        Some(self.layout_type_part()?)
                }
                Tok::Star => {
                    l.attrs.get_or_insert_with(Default::default).pointer_type =
                        Some(self.layout_type_part()?)
                }
                Tok::Ident("E") => {
                    l.attrs
                        .get_or_insert_with(Default::default)
                        .element_size_bits = Some(self.layout_int_part()?)
                }
                Tok::Ident("S") => {
                    l.attrs.get_or_insert_with(Default::default).memory_space =
                        Some(self.layout_int_part()?)
                }
                Tok::Ident("M") => {
                    l.attrs
                        .get_or_insert_with(Default::default)
                        .dynamic_metadata_prefix_bytes = Some(self.layout_int_part()?)
                }
                Tok::Ident("SC") => {
                    self.bump();
                    while self.eat(Tok::LParen) {
                        let dim = self.int()?;
                        self.expect(Tok::Colon, "':' in split config")?;
                        let idx = self.int_list_until(Tok::RParen)?;
                        self.expect(Tok::RParen, "')'")?;
                        l.attrs
                            .get_or_insert_with(Default::default)
                            .split_configs
                            .push((dim, idx));
                    }
                }
                Tok::Ident("P") => {
                    self.bump();
                    self.expect(Tok::LParen, "'('")?;
                    // With the shape's own level, a physical shape counts as 4.
                    self.enter_weighted(3)?;
                    l.attrs.get_or_insert_with(Default::default).physical_shape =
                        Some(Box::new(self.shape()?));
                    self.leave_weighted(3);
                    self.expect(Tok::RParen, "')'")?;
                }
                Tok::RBrace => return Ok(()),
                _ => return Err(self.expected("a layout attribute (T, L, E, S, ...) or '}'")),
            }
        }
    }

    pub(super) fn dim_level_types(&mut self) -> PResult<Vec<String>> {
        self.expect(Tok::LParen, "'('")?;
        let mut out = Vec::new();
        while !matches!(self.tok.tok, Tok::RParen) {
            let t = self.bump();
            let mut s = match t.tok {
                Tok::Ident(s) => s.to_string(),
                _ => return Err(self.err_at(&t, "expected a dim level type (D, C, S, H)")),
            };
            if self.eat(Tok::Plus) {
                s.push('+');
            }
            if self.eat(Tok::Tilde) {
                s.push('~');
            }
            out.push(s);
            if !self.eat(Tok::Comma) {
                break;
            }
        }
        self.expect(Tok::RParen, "')'")?;
        Ok(out)
    }

    pub(super) fn layout_int_part(&mut self) -> PResult<i64> {
        self.bump();
        self.expect(Tok::LParen, "'('")?;
        let v = self.int()?;
        self.expect(Tok::RParen, "')'")?;
        Ok(v)
    }

    pub(super) fn layout_type_part(&mut self) -> PResult<PrimitiveType> {
        self.bump();
        self.expect(Tok::LParen, "'('")?;
        let t = self.bump();
        let ty = match t.tok {
            Tok::Ident(s) => PrimitiveType::from_name(s),
            _ => None,
        };
        self.expect(Tok::RParen, "')'")?;
        ty.ok_or_else(|| self.err_at(&t, "expected an element type"))
    }
}
