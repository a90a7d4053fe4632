//! Shardy (`xla.sdy.*`) frontend attributes as JAX exports them into HLO:
//! meshes in the module header, per-value shardings and manual axes on
//! instructions. Shared by the partitioner and the interpreter.

use crate::attr::FrontendValue;
use crate::{AttrValue, Instruction, Module};

/// One mesh of `xla.sdy.meshes`: its name and named axes (devices row-major).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SdyMesh {
    pub name: String,
    pub axes: Vec<(String, i64)>,
    /// `device_ids=[...]` when the mesh lists its devices explicitly.
    pub device_ids: Option<Vec<i64>>,
}

/// A mesh axis named by a sharding: `"a"` or the sub-axis `"a":(pre)size`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AxisRef {
    pub name: String,
    pub sub: Option<(i64, i64)>,
}

fn value_text(v: &FrontendValue) -> &str {
    match v {
        FrontendValue::Str(s) | FrontendValue::Raw(s) => s,
    }
}

/// The frontend attribute `key` of an instruction.
pub fn frontend_attr<'a>(ins: &'a Instruction, key: &str) -> Option<&'a str> {
    match ins.attr("frontend_attributes")? {
        AttrValue::FrontendAttrs(kv) => kv
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| value_text(v)),
        _ => None,
    }
}

/// The module header's `xla.sdy.meshes` text, if any.
pub fn meshes_text(m: &Module) -> Option<&str> {
    match &m.config.frontend_attributes {
        Some(AttrValue::FrontendAttrs(kv)) => kv
            .iter()
            .find(|(k, _)| k == "xla.sdy.meshes")
            .map(|(_, v)| value_text(v)),
        _ => None,
    }
}

/// Parses `{mesh = #sdy.mesh<["a"=4, "b"=2]>, other = #sdy.mesh<[...], device_ids=[...]>}`.
pub fn parse_meshes(text: &str) -> Result<Vec<SdyMesh>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("#sdy.mesh<") {
        let name = rest[..at]
            .trim_end()
            .trim_end_matches('=')
            .trim_end()
            .rsplit(|c: char| c == '{' || c == ',' || c.is_whitespace())
            .next()
            .unwrap_or("")
            .to_string();
        let body = &rest[at + "#sdy.mesh<".len()..];
        let end = body
            .find('>')
            .ok_or_else(|| format!("unterminated mesh in '{text}'"))?;
        let spec = &body[..end];
        let (axes_part, ids_part) = match spec.find("device_ids") {
            Some(p) => (&spec[..p], Some(&spec[p..])),
            None => (spec, None),
        };
        let axes_text = axes_part
            .trim()
            .trim_end_matches(',')
            .trim()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let axes = axes_text
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(|a| {
                let (n, s) = a
                    .split_once('=')
                    .ok_or_else(|| format!("mesh axis '{a}'"))?;
                let size = s
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| format!("mesh axis '{a}'"))?;
                Ok((
                    n.trim().trim_matches('\\').trim_matches('"').to_string(),
                    size,
                ))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let device_ids = ids_part
            .map(|t| {
                let inner = t
                    .split_once('[')
                    .and_then(|(_, r)| r.split_once(']'))
                    .map_or("", |(a, _)| a);
                inner
                    .split(',')
                    .map(str::trim)
                    .filter(|x| !x.is_empty())
                    .map(|x| x.parse::<i64>().map_err(|_| format!("device id '{x}'")))
                    .collect::<Result<Vec<_>, String>>()
            })
            .transpose()?;
        out.push(SdyMesh {
            name,
            axes,
            device_ids,
        });
        rest = &body[end..];
    }
    Ok(out)
}

fn parse_axis_ref(a: &str) -> Result<AxisRef, String> {
    let (name, sub) = match a.split_once(':') {
        Some((n, s)) => {
            let s = s.trim();
            let (pre, size) = s
                .strip_prefix('(')
                .and_then(|r| r.split_once(')'))
                .ok_or_else(|| format!("sub-axis '{a}'"))?;
            let pre = pre
                .trim()
                .parse::<i64>()
                .map_err(|_| format!("sub-axis '{a}'"))?;
            let size = size
                .trim()
                .parse::<i64>()
                .map_err(|_| format!("sub-axis '{a}'"))?;
            (n, Some((pre, size)))
        }
        None => (a, None),
    };
    Ok(AxisRef {
        name: name.trim().trim_matches('\\').trim_matches('"').to_string(),
        sub,
    })
}

/// `#sdy.sharding_per_value<[<@mesh, [{"a"}, {}]>, ...]>` (or one
/// `#sdy.sharding<@mesh, [...]>`): per value, per dim, the axes (major first).
/// Open-dimension markers `?` are dropped.
pub fn parse_per_value(text: &str) -> Result<Vec<Vec<Vec<AxisRef>>>, String> {
    Ok(parse_per_value_open(text)?
        .into_iter()
        .map(|dims| dims.into_iter().map(|(axes, _)| axes).collect())
        .collect())
}

/// One dim of a Shardy sharding: its axes (major first) and whether it is
/// open (`{"a", ?}`, `{?}`: propagation may add axes after those).
pub type DimSharding = (Vec<AxisRef>, bool);

/// [`parse_per_value`] with, per dim, whether it is open.
pub fn parse_per_value_open(text: &str) -> Result<Vec<Vec<DimSharding>>, String> {
    let bad = || format!("Shardy sharding '{text}'");
    let mut values = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find('@') {
        let body = &rest[at + 1..];
        let open = body.find('[').ok_or_else(bad)?;
        let close = body[open..].find(']').ok_or_else(bad)? + open;
        let dims_text = &body[open + 1..close];
        let mut dims = Vec::new();
        let mut d = dims_text;
        while let Some(o) = d.find('{') {
            let c = d[o..].find('}').ok_or_else(bad)? + o;
            let inner = &d[o + 1..c];
            let open = inner.split(',').any(|a| a.trim() == "?");
            let axes: Vec<AxisRef> = inner
                .split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty() && *a != "?")
                .map(parse_axis_ref)
                .collect::<Result<_, _>>()?;
            dims.push((axes, open));
            d = &d[c + 1..];
        }
        values.push(dims);
        rest = &body[close..];
    }
    Ok(values)
}

/// `#sdy<manual_axes{"a", "b"}>`: the manual axes' names.
pub fn parse_manual_axes(text: &str) -> Vec<String> {
    let inner = text
        .split_once('{')
        .and_then(|(_, r)| r.split_once('}'))
        .map(|(a, _)| a)
        .unwrap_or("");
    inner
        .split(',')
        .map(|a| a.trim().trim_matches('\\').trim_matches('"').to_string())
        .filter(|a| !a.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_meshes_shardings_and_manual_axes() {
        let m = parse_meshes(r#"{mesh = #sdy.mesh<["a"=4, "b"=2]>}"#).unwrap();
        assert_eq!(m[0].name, "mesh");
        assert_eq!(m[0].axes, vec![("a".into(), 4), ("b".into(), 2)]);
        let v = parse_per_value(
            r#"#sdy.sharding_per_value<[<@mesh, [{"a", ?}, {?}]>, <@mesh, [{}, {"b":(1)2}]>]>"#,
        )
        .unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0][0][0].name, "a");
        assert!(v[0][1].is_empty());
        assert_eq!(v[1][1][0].sub, Some((1, 2)));
        assert_eq!(
            parse_manual_axes(r#"#sdy<manual_axes{"a", "b"}>"#),
            vec!["a", "b"]
        );
    }

    #[test]
    fn open_dims_are_told_apart_from_closed_ones() {
        let v =
            parse_per_value_open(r#"#sdy.sharding<@mesh, [{"a", ?}, {?}, {}, {"b"}]>"#).unwrap();
        let open: Vec<bool> = v[0].iter().map(|(_, open)| *open).collect();
        assert_eq!(open, vec![true, true, false, false]);
        assert_eq!(v[0][0].0[0].name, "a");
    }
}
