//! Constant literals (HLO_GRAMMAR §7).

use super::*;

impl<'a> Parser<'a> {
    pub(super) fn literal(&mut self, shape: &Shape) -> PResult<Literal> {
        self.enter()?;
        let r = self.literal_inner(shape);
        self.leave();
        r
    }

    pub(super) fn literal_inner(&mut self, shape: &Shape) -> PResult<Literal> {
        match shape {
            Shape::Tuple(elems) => {
                self.expect(Tok::LParen, "'(' to open a tuple literal")?;
                let mut v = Vec::new();
                for (i, e) in elems.iter().enumerate() {
                    if i > 0 {
                        self.expect(Tok::Comma, "',' between tuple literal elements")?;
                    }
                    v.push(self.literal(e)?);
                }
                self.expect(Tok::RParen, "')' to close the tuple literal")?;
                Ok(Literal::Tuple(v))
            }
            Shape::Buffer(_) => Err(self.err_here("buffer shapes cannot be constants")),
            Shape::Array(a) => {
                if a.ty == PrimitiveType::Token {
                    if self.is_ident("token") {
                        self.bump();
                    }
                    return Ok(Literal::Array(LiteralData::Token));
                }
                if !a.ty.is_array_type() {
                    return Err(
                        self.err_here(format!("constants of type {} are not supported", a.ty))
                    );
                }
                if a.dims.iter().any(|&d| d < 0) {
                    return Err(self.err_here("constants cannot have dynamic dimensions"));
                }
                if a.rank() > 0 && matches!(self.tok.tok, Tok::LBrace) && self.peek_is_ellipsis() {
                    self.bump();
                    self.bump();
                    self.expect(Tok::RBrace, "'}' after '...'")?;
                    return Ok(Literal::Elided);
                }
                let mut data = empty_data(a.ty);
                if a.rank() == 0 {
                    self.scalar_into(a.ty, &mut data)?;
                } else {
                    self.nested_into(a.ty, &a.dims, &mut data)?;
                }
                Ok(Literal::Array(data))
            }
        }
    }

    pub(super) fn peek_is_ellipsis(&mut self) -> bool {
        self.peek_next().tok == Tok::Ellipsis
    }

    pub(super) fn nested_into(
        &mut self,
        ty: PrimitiveType,
        dims: &[i64],
        data: &mut LiteralData,
    ) -> PResult<()> {
        self.enter()?;
        let open = self.expect(Tok::LBrace, "'{' in an array literal")?;
        let (n, rest) = dims.split_first().expect("rank >= 1");
        let mut count = 0i64;
        while !matches!(self.tok.tok, Tok::RBrace) {
            if count >= *n {
                return Err(
                    self.err_here(format!("too many elements: this dimension has size {n}"))
                );
            }
            if rest.is_empty() {
                if matches!(self.tok.tok, Tok::LBrace) {
                    return Err(self
                        .err_here("too many '{': the literal is nested deeper than its shape")
                        .with_hint("write one level of braces per dimension of the shape"));
                }
                self.scalar_into(ty, data)?;
            } else {
                self.nested_into(ty, rest, data)?;
            }
            count += 1;
            if !self.eat(Tok::Comma) {
                break;
            }
        }
        self.expect(Tok::RBrace, "'}' in an array literal")?;
        // A dimension of zero elements may be written `{}` at any depth.
        if count != *n && !(count == 0 && dims.contains(&0)) {
            return Err(self.err_at(
                &open,
                format!("expected {n} elements in this dimension, found {count}"),
            ));
        }
        self.leave();
        Ok(())
    }

    pub(super) fn scalar_into(&mut self, ty: PrimitiveType, data: &mut LiteralData) -> PResult<()> {
        let t = self.tok;
        match data {
            LiteralData::Pred(v) => {
                let b = match t.tok {
                    Tok::Ident("true") => true,
                    Tok::Ident("false") => false,
                    Tok::Int(i) => i != 0,
                    Tok::UInt64(_) => true,
                    _ => return Err(self.expected("a pred value (true, false, 0 or 1)")),
                };
                self.bump();
                v.push(b);
            }
            LiteralData::Int(v) => {
                let i = match t.tok {
                    Tok::Int(i) => i128::from(i),
                    Tok::UInt64(u) => i128::from(u),
                    _ => return Err(self.expected(&format!("an integer for {ty}"))),
                };
                self.bump();
                v.push(check_int_range(i, ty).ok_or_else(|| {
                    let (lo, hi) = int_range(ty);
                    self.err_at(&t, format!("{i} is out of range for {ty}"))
                        .with_hint(format!("{ty} values are from {lo} to {hi}"))
                })?);
            }
            LiteralData::Float(v) => {
                let x = self.float_value()?;
                v.push(round_to_type(x, ty));
            }
            LiteralData::Complex(v) => {
                self.expect(Tok::LParen, "'(' for a complex value")?;
                let re = self.float_value()?;
                self.expect(Tok::Comma, "','")?;
                let im = self.float_value()?;
                self.expect(Tok::RParen, "')'")?;
                v.push((round_to_type(re, ty), round_to_type(im, ty)));
            }
            LiteralData::Token => return Err(self.expected("a token")),
        }
        Ok(())
    }
}

pub(super) fn empty_data(ty: PrimitiveType) -> LiteralData {
    match ty.kind() {
        TypeKind::Pred => LiteralData::Pred(Vec::new()),
        TypeKind::Signed | TypeKind::Unsigned => LiteralData::Int(Vec::new()),
        TypeKind::Complex => LiteralData::Complex(Vec::new()),
        TypeKind::Float => LiteralData::Float(Vec::new()),
        _ => LiteralData::Token,
    }
}

/// Range-checks an integer literal against its type; u64 values are kept as bits.
pub(super) fn check_int_range(v: i128, ty: PrimitiveType) -> Option<i64> {
    let (lo, hi) = int_range(ty);
    (lo..=hi).contains(&v).then_some(v as u64 as i64)
}

/// The smallest and largest value of an integer type.
pub(super) fn int_range(ty: PrimitiveType) -> (i128, i128) {
    let bits = ty.bit_width();
    if ty.is_signed_int() {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    }
}
