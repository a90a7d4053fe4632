//! Manual (shard_map) regions of unpartitioned modules exported by Shardy.
//!
//! JAX's pre-optimization HLO keeps global shapes everywhere except inside
//! `shard_map` bodies, which work on per-device shards between the custom-calls
//! `xla.sdy.GlobalToLocalShape` and `xla.sdy.LocalToGlobalShape`. We run such a
//! module on every device of its mesh (`xla.sdy.meshes` in the module header, device
//! ids in row-major mesh order): the global parts compute the same values on every
//! device, GlobalToLocalShape takes this device's block of each operand (by the
//! `xla.sdy.in_shardings` over the manual axes), the body's collectives meet across
//! devices, and LocalToGlobalShape gathers every device's block back into the
//! global array (by `xla.sdy.out_shardings`; replicated copies come from the lowest
//! device).

use crate::collectives::exchange;
use crate::eval::{array_dims, Interp};
use crate::value::{Array, Value};
use crate::InterpError;
use std::collections::HashSet;
use std::sync::Arc;
use tpusim_hlo::attr::FrontendValue;
use tpusim_hlo::{AttrValue, InstrId, Instruction, Module, Opcode, Shape};

const TO_LOCAL: &str = "xla.sdy.GlobalToLocalShape";
const TO_GLOBAL: &str = "xla.sdy.LocalToGlobalShape";

fn unsupported(msg: impl Into<String>) -> InterpError {
    InterpError::Unsupported(msg.into())
}

/// Whether `ins` enters or leaves a Shardy manual region.
pub(crate) fn is_boundary(ins: &Instruction) -> bool {
    ins.opcode == Opcode::CustomCall
        && matches!(
            ins.attr_ident("custom_call_target"),
            Some(TO_LOCAL | TO_GLOBAL)
        )
}

/// Whether the module has a manual region whose shards differ from the globals.
pub fn has_manual_regions(m: &Module) -> bool {
    m.instrs.iter().any(|i| {
        is_boundary(i)
            && i.operands
                .iter()
                .flat_map(|&o| m.instr(o).shape.leaves())
                .map(|a| &a.dims)
                .ne(i.shape.leaves().iter().map(|a| &a.dims))
    })
}

/// A Shardy mesh: axis names and sizes, devices numbered row-major.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mesh {
    pub name: String,
    pub axes: Vec<(String, usize)>,
}

impl Mesh {
    pub fn devices(&self) -> usize {
        self.axes.iter().map(|a| a.1).product()
    }
    fn size(&self, axis: &str) -> Result<usize, InterpError> {
        self.axes
            .iter()
            .find(|a| a.0 == axis)
            .map(|a| a.1)
            .ok_or_else(|| unsupported(format!("mesh axis '{axis}' not in mesh '{}'", self.name)))
    }
    /// Device `d`'s coordinate along `axis`.
    fn coord(&self, d: usize, axis: &str) -> Result<usize, InterpError> {
        let mut stride = 1;
        for (name, size) in self.axes.iter().rev() {
            if name == axis {
                return Ok(d / stride % size);
            }
            stride *= size;
        }
        Err(unsupported(format!(
            "mesh axis '{axis}' not in mesh '{}'",
            self.name
        )))
    }
}

/// The meshes of `xla.sdy.meshes` in the module header (parsed by
/// `tpusim_hlo::sdy`); the interpreter runs row-major meshes only.
pub fn meshes(m: &Module) -> Result<Vec<Mesh>, InterpError> {
    let text = tpusim_hlo::sdy::meshes_text(m)
        .ok_or_else(|| unsupported("manual region without xla.sdy.meshes in the module header"))?;
    let parsed = tpusim_hlo::sdy::parse_meshes(text)
        .map_err(|e| unsupported(format!("mesh '{text}': {e}")))?;
    parsed
        .into_iter()
        .map(|mesh| {
            if mesh.device_ids.is_some() {
                return Err(unsupported("meshes with explicit device_ids"));
            }
            let axes = mesh
                .axes
                .into_iter()
                .map(|(name, size)| {
                    usize::try_from(size)
                        .map(|size| (name.clone(), size))
                        .map_err(|_| unsupported(format!("mesh axis '{name}'={size}")))
                })
                .collect::<Result<_, _>>()?;
            Ok(Mesh {
                name: mesh.name,
                axes,
            })
        })
        .collect()
}

/// The mesh a module's manual regions run on (its devices).
pub fn manual_mesh(m: &Module) -> Result<Mesh, InterpError> {
    let all = meshes(m)?;
    match all.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(unsupported(format!("{} meshes in one module", all.len()))),
    }
}

/// `#sdy.sharding_per_value<[<@mesh, [{"a"}, {}]>, ...]>`: per value, per dim,
/// the axes (major first), parsed by `tpusim_hlo::sdy`; the interpreter runs
/// whole axes only, so a sub-axis is unsupported here.
fn parse_per_value(text: &str) -> Result<Vec<Vec<Vec<String>>>, InterpError> {
    let values = tpusim_hlo::sdy::parse_per_value(text)
        .map_err(|e| unsupported(format!("Shardy sharding '{text}': {e}")))?;
    values
        .into_iter()
        .map(|dims| {
            dims.into_iter()
                .map(|axes| {
                    axes.into_iter()
                        .map(|a| match a.sub {
                            None => Ok(a.name),
                            Some(_) => {
                                Err(unsupported(format!("sub-axis of '{}' in '{text}'", a.name)))
                            }
                        })
                        .collect()
                })
                .collect()
        })
        .collect()
}

fn frontend(ins: &Instruction, key: &str) -> Result<String, InterpError> {
    match ins.attr("frontend_attributes") {
        Some(AttrValue::FrontendAttrs(kv)) => {
            kv.iter().find(|(k, _)| k == key).map(|(_, v)| match v {
                FrontendValue::Str(s) | FrontendValue::Raw(s) => s.clone(),
            })
        }
        _ => None,
    }
    .ok_or_else(|| unsupported(format!("'{}' without {key}", ins.name)))
}

/// `#sdy<manual_axes{"a", "b"}>`.
fn manual_axes(ins: &Instruction) -> Result<Vec<String>, InterpError> {
    let t = frontend(ins, "xla.sdy.manual_axes")?;
    let inner = t
        .split_once('{')
        .and_then(|(_, r)| r.split_once('}'))
        .map(|(a, _)| a)
        .unwrap_or("");
    Ok(inner
        .split(',')
        .map(|a| a.trim().trim_matches('"').to_string())
        .filter(|a| !a.is_empty())
        .collect())
}

/// Tile count and this device's tile along each dim, over the manual axes only.
fn tiles_of(
    mesh: &Mesh,
    dims_axes: &[Vec<String>],
    manual: &[String],
    device: usize,
) -> Result<Vec<(usize, usize)>, InterpError> {
    dims_axes
        .iter()
        .map(|axes| {
            axes.iter().filter(|a| manual.contains(a)).try_fold(
                (1usize, 0usize),
                |(count, idx), a| {
                    let s = mesh.size(a)?;
                    Ok((count * s, idx * s + mesh.coord(device, a)?))
                },
            )
        })
        .collect()
}

/// Evaluates GlobalToLocalShape / LocalToGlobalShape on this device.
pub(crate) fn eval(
    interp: &Interp,
    id: InstrId,
    ops: &[Arc<Value>],
) -> Result<Arc<Value>, InterpError> {
    let m = interp.m;
    let ins = m.instr(id);
    let mesh = manual_mesh(m)?;
    let dev = interp.dev;
    if dev.replicas * dev.partitions != mesh.devices() {
        return Err(unsupported(format!(
            "manual region over a {}-device mesh on {} device(s); run the module with run_global",
            mesh.devices(),
            dev.replicas * dev.partitions
        )));
    }
    let manual = manual_axes(ins)?;
    let out_shapes: Vec<&Shape> = match &ins.shape {
        Shape::Tuple(t) => t.iter().collect(),
        s => vec![s],
    };
    let to_local = ins.attr_ident("custom_call_target") == Some(TO_LOCAL);
    let key = if to_local {
        "xla.sdy.in_shardings"
    } else {
        "xla.sdy.out_shardings"
    };
    let shardings = parse_per_value(&frontend(ins, key)?)?;
    if shardings.len() != ops.len() || out_shapes.len() != ops.len() {
        return Err(unsupported(format!(
            "'{}': {} shardings for {} values",
            ins.name,
            shardings.len(),
            ops.len()
        )));
    }
    let results: Vec<Value> = if to_local {
        ops.iter()
            .zip(&shardings)
            .zip(&out_shapes)
            .map(|((v, s), shape)| {
                let tiles = tiles_of(&mesh, s, &manual, dev.device)?;
                block(v.as_array()?, &tiles, shape).map(Value::Array)
            })
            .collect::<Result<_, _>>()?
    } else {
        let mine = Value::Tuple(ops.to_vec());
        let n = mesh.devices();
        let all = exchange(interp, id, (0..n).collect(), dev.device, mine)?;
        (0..ops.len())
            .map(|k| {
                let (ty, dims) = array_dims(out_shapes[k])?;
                let mut out = Array::zeros(ty, dims)?;
                let mut placed = HashSet::new();
                for (d, contribution) in all.iter().enumerate() {
                    let tiles = tiles_of(&mesh, &shardings[k], &manual, d)?;
                    if !placed.insert(tiles.clone()) {
                        continue;
                    }
                    let local = match contribution {
                        Value::Tuple(t) => t
                            .get(k)
                            .ok_or_else(|| InterpError::Internal("missing shard".into()))?
                            .as_array()?,
                        a => a.as_array()?,
                    };
                    place(&mut out, local, &tiles)?;
                }
                Ok(Value::Array(out))
            })
            .collect::<Result<_, InterpError>>()?
    };
    Ok(Arc::new(match (&ins.shape, results.len()) {
        (Shape::Tuple(_), _) => Value::tuple(results),
        (_, 1) => results
            .into_iter()
            .next()
            .unwrap_or(Value::tuple(Vec::new())),
        _ => Value::tuple(results),
    }))
}

fn check_tiling(
    global: &[usize],
    local: &[usize],
    tiles: &[(usize, usize)],
) -> Result<(), InterpError> {
    let ok = global.len() == local.len()
        && global.len() == tiles.len()
        && global
            .iter()
            .zip(local)
            .zip(tiles)
            .all(|((&g, &l), &(t, _))| g == l * t);
    if ok {
        Ok(())
    } else {
        Err(unsupported(format!(
            "manual shards {local:?} of {global:?} with tiles {:?}",
            tiles.iter().map(|t| t.0).collect::<Vec<_>>()
        )))
    }
}

/// This device's block of `global`.
fn block(global: &Array, tiles: &[(usize, usize)], shape: &Shape) -> Result<Array, InterpError> {
    let (ty, local) = array_dims(shape)?;
    check_tiling(&global.dims, &local, tiles)?;
    let offsets: Vec<usize> = tiles.iter().zip(&local).map(|(t, l)| t.1 * l).collect();
    let mut out = Array::zeros(ty, local.clone())?;
    crate::sharding::for_each_block_run(&global.dims, &offsets, &local, |g, l, n| {
        out.data.copy_run(l, &global.data, g, n)
    })?;
    Ok(out)
}

/// Writes `local` into its block of `out`.
fn place(out: &mut Array, local: &Array, tiles: &[(usize, usize)]) -> Result<(), InterpError> {
    check_tiling(&out.dims, &local.dims, tiles)?;
    let offsets: Vec<usize> = tiles
        .iter()
        .zip(&local.dims)
        .map(|(t, l)| t.1 * l)
        .collect();
    let dims = out.dims.clone();
    crate::sharding::for_each_block_run(&dims, &offsets, &local.dims, |g, l, n| {
        out.data.copy_run(g, &local.data, l, n)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_shardy_shardings() {
        let v = parse_per_value(
            r#"#sdy.sharding_per_value<[<@mesh, [{}, {"b"}]>, <@mesh, [{"a", "b"}, {?}]>]>"#,
        )
        .unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0], vec![vec![], vec!["b".to_string()]]);
        assert_eq!(v[1], vec![vec!["a".to_string(), "b".to_string()], vec![]]);
        assert!(parse_per_value(r#"<@mesh, [{"a":(1)2}]>"#).is_err());
    }

    #[test]
    fn mesh_coordinates_are_row_major() {
        let mesh = Mesh {
            name: "mesh".into(),
            axes: vec![("a".into(), 4), ("b".into(), 2)],
        };
        assert_eq!(mesh.coord(5, "a").unwrap(), 2);
        assert_eq!(mesh.coord(5, "b").unwrap(), 1);
        let manual = vec!["a".to_string(), "b".to_string()];
        let t = tiles_of(&mesh, &[vec!["b".into(), "a".into()], vec![]], &manual, 5).unwrap();
        assert_eq!(t, vec![(8, 6), (1, 0)]);
    }
}
