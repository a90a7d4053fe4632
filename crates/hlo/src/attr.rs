//! Instruction attributes: typed values for the ones the simulator reads, verbatim
//! text for the rest (so printing loses nothing).

use crate::ir::{CompId, InstrId};
use crate::literal::Literal;
use crate::shape::Shape;

/// One attribute value (large variants are boxed to keep every attribute small).
/// Which variant an attribute gets depends on its name
/// (see `parser::attr_kind`), so every attribute of a given name has one type.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Int(i64),
    Float(f64),
    Bool(bool),
    /// An enum value written bare: `kLoop`, `GT`, `rng_default`, `default`.
    Ident(String),
    /// A quoted string (stored unescaped).
    Str(String),
    /// `{1,2,3}`.
    Ints(Vec<i64>),
    /// `{{0,1},{1,2}}`.
    IntLists(Vec<Vec<i64>>),
    /// `{true,false}`.
    Bools(Vec<bool>),
    /// `{default,high}`.
    Idents(Vec<String>),
    Comp(CompId),
    Comps(Vec<CompId>),
    Instrs(Vec<InstrId>),
    Window(Window),
    Slice(Vec<SliceDim>),
    Padding(Vec<PadDim>),
    DimLabels(Box<ConvDimLabels>),
    Sharding(Box<Sharding>),
    ReplicaGroups(Box<ReplicaGroups>),
    Metadata(Box<Metadata>),
    /// `frontend_attributes={k="v",...}`; values are strings or raw JSON.
    FrontendAttrs(Vec<(String, FrontendValue)>),
    Shape(Box<Shape>),
    Shapes(Vec<Shape>),
    /// `literal=SHAPE LITERAL` (custom-call).
    Literal(Box<(Shape, Literal)>),
    /// `{ {0}: (1, {}) , ...}`: (output index, operand number, operand index).
    OperandAliasing(Vec<(Vec<i64>, i64, Vec<i64>)>),
    /// Anything kept verbatim: backend_config JSON, origin, statistics, domain...
    Raw(String),
}

/// A frontend attribute value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrontendValue {
    Str(String),
    /// Raw balanced-brace text (JSON), printed verbatim.
    Raw(String),
}

/// `window={size=3x3 stride=2x2 pad=0_1x0_1 lhs_dilate=.. rhs_dilate=.. rhs_reversal=..}`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub dims: Vec<WindowDim>,
}

/// One dimension of a window, with XLA's defaults when a field is absent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowDim {
    pub size: i64,
    pub stride: i64,
    pub padding_low: i64,
    pub padding_high: i64,
    pub base_dilation: i64,
    pub window_dilation: i64,
    pub reversal: bool,
}

impl Default for WindowDim {
    fn default() -> Self {
        WindowDim {
            size: 1,
            stride: 1,
            padding_low: 0,
            padding_high: 0,
            base_dilation: 1,
            window_dilation: 1,
            reversal: false,
        }
    }
}

/// `[start:limit:stride]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SliceDim {
    pub start: i64,
    pub limit: i64,
    pub stride: i64,
}

/// `lo_hi_interior` of one dimension of `pad`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PadDim {
    pub low: i64,
    pub high: i64,
    pub interior: i64,
}

/// Convolution dimension numbers decoded from `dim_labels=b01f_01io->b01f`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvDimLabels {
    /// The text as written (canonical already: one char per dimension).
    pub text: String,
    pub input_batch: i64,
    pub input_feature: i64,
    pub input_spatial: Vec<i64>,
    pub kernel_input_feature: i64,
    pub kernel_output_feature: i64,
    pub kernel_spatial: Vec<i64>,
    pub output_batch: i64,
    pub output_feature: i64,
    pub output_spatial: Vec<i64>,
}

/// Device list of a tile assignment or replica groups: explicit, or an iota
/// `<=[reshape]T(perm)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceList {
    Explicit(Vec<i64>),
    Iota {
        reshape: Vec<i64>,
        transpose: Vec<i64>,
    },
}

impl DeviceList {
    /// The device ids in order. `count` is the number of devices expected.
    pub fn expand(&self) -> Vec<i64> {
        match self {
            DeviceList::Explicit(v) => v.clone(),
            DeviceList::Iota { reshape, transpose } => iota_devices(reshape, transpose),
        }
    }
}

/// The prime factors of `n`, smallest first, with repetition: the factor
/// axes device meshes are split into (the partitioner's mesh, the pod's mesh
/// placement).
pub fn prime_factors(mut n: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut p = 2;
    // `p <= n / p` rather than `p * p <= n`: no overflow near u32::MAX.
    while p <= n / p {
        while n.is_multiple_of(p) {
            out.push(p);
            n /= p;
        }
        p += 1;
    }
    if n > 1 {
        out.push(n);
    }
    out
}

/// Expands `iota(prod(reshape))` reshaped to `reshape` and transposed by `perm`.
pub fn iota_devices(reshape: &[i64], perm: &[i64]) -> Vec<i64> {
    let n: i64 = reshape.iter().product();
    if perm.is_empty() || n <= 0 {
        return (0..n.max(0)).collect();
    }
    let rank = reshape.len();
    // Row-major strides of the reshaped (untransposed) array.
    let mut strides = vec![1i64; rank];
    for i in (0..rank.saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * reshape[i + 1];
    }
    let out_dims: Vec<i64> = perm.iter().map(|&p| reshape[p as usize]).collect();
    let mut idx = vec![0i64; rank];
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let src: i64 = (0..rank).map(|i| idx[i] * strides[perm[i] as usize]).sum();
        out.push(src);
        for d in (0..rank).rev() {
            idx[d] += 1;
            if idx[d] < out_dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

/// A tile assignment `[dims]devices`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TileAssignment {
    pub dims: Vec<i64>,
    pub devices: DeviceList,
}

/// One (non-tuple) sharding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShardingKind {
    Replicated,
    Manual,
    Unknown,
    Unreduced,
    Maximal {
        device: i64,
    },
    Tiled(TileAssignment),
    /// Named (mesh) shardings and other forms we keep verbatim (the braces' content).
    Raw(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SingleSharding {
    pub kind: ShardingKind,
    pub last_tile_dim_replicate: bool,
    pub last_tile_dims: Vec<String>,
    /// `shard_as N` (true) or `shard_like N` (false).
    pub shard_group: Option<(bool, i64)>,
    /// `metadata=...`, verbatim.
    pub metadata: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sharding {
    Single(SingleSharding),
    Tuple(Vec<SingleSharding>),
}

/// `replica_groups=`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplicaGroups {
    Explicit(Vec<Vec<i64>>),
    /// `[groups,size]<=[reshape]T(perm)`.
    Iota {
        num_groups: i64,
        group_size: i64,
        reshape: Vec<i64>,
        transpose: Vec<i64>,
    },
    /// `mesh['x'=2,'y'=4], device_ids=([4,2]T(1,0)) {'y','x':(1)2}`: the mesh's
    /// devices (`device_ids` in row-major mesh order, `0..n` when absent) form
    /// groups along the listed axes, in the listed order.
    Mesh {
        axes: Vec<(String, i64)>,
        device_ids: Option<DeviceList>,
        selected: Vec<MeshAxisRef>,
    },
}

/// One grouped axis of a mesh replica group: `'x'` or the sub-axis `'x':(pre)size`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeshAxisRef {
    pub name: String,
    /// `(pre_size, size)`: the axis reshaped to `[pre_size, size, rest]` (row-major),
    /// this reference being the middle dim.
    pub sub: Option<(i64, i64)>,
}

impl ReplicaGroups {
    /// The groups as explicit lists of ids.
    pub fn expand(&self) -> Vec<Vec<i64>> {
        match self {
            ReplicaGroups::Explicit(g) => g.clone(),
            ReplicaGroups::Iota {
                num_groups,
                group_size,
                reshape,
                transpose,
            } => {
                let ids = iota_devices(reshape, transpose);
                let size = (*group_size).max(1) as usize;
                ids.chunks(size)
                    .take((*num_groups).max(0) as usize)
                    .map(<[i64]>::to_vec)
                    .collect()
            }
            ReplicaGroups::Mesh {
                axes,
                device_ids,
                selected,
            } => mesh_groups(axes, device_ids.as_ref(), selected),
        }
    }
}

/// Groups of a mesh, as XLA forms them: every mesh axis is split into the dims
/// its sub-axes name (sorted by `pre_size`, with filler dims between them), the
/// device array (`device_ids` reshaped to the split dims) is transposed so that
/// the ungrouped dims come first and the grouped ones last in the listed order,
/// and consecutive runs of the group size are the groups. An inconsistent mesh
/// (which the parser rejects) gives no groups.
fn mesh_groups(
    axes: &[(String, i64)],
    device_ids: Option<&DeviceList>,
    selected: &[MeshAxisRef],
) -> Vec<Vec<i64>> {
    let Some((dims, grouped)) = mesh_split_dims(axes, selected) else {
        return Vec::new();
    };
    let n: i64 = axes.iter().map(|a| a.1).product();
    let devices = device_ids.map_or_else(|| (0..n).collect(), DeviceList::expand);
    if devices.len() as i64 != n || dims.iter().product::<i64>() != n {
        return Vec::new();
    }
    let perm: Vec<i64> = (0..dims.len() as i64)
        .filter(|d| !grouped.contains(d))
        .chain(grouped.iter().copied())
        .collect();
    let size: i64 = grouped.iter().map(|&d| dims[d as usize]).product();
    let order: Vec<i64> = iota_devices(&dims, &perm)
        .into_iter()
        .map(|i| devices[i as usize])
        .collect();
    order
        .chunks(size.max(1) as usize)
        .map(<[i64]>::to_vec)
        .collect()
}

/// The mesh axes split at their sub-axes, and which split dim each listed axis
/// reference is, in listed order. `None` when the references do not tile their axes.
pub fn mesh_split_dims(
    axes: &[(String, i64)],
    selected: &[MeshAxisRef],
) -> Option<(Vec<i64>, Vec<i64>)> {
    let mut dims = Vec::new();
    let mut grouped = vec![-1i64; selected.len()];
    for (name, full) in axes {
        let mut refs: Vec<(usize, i64, i64)> = selected
            .iter()
            .enumerate()
            .filter(|(_, r)| r.name == *name)
            .map(|(k, r)| {
                let (pre, size) = r.sub.unwrap_or((1, *full));
                (k, pre, size)
            })
            .collect();
        if refs.is_empty() {
            dims.push(*full);
            continue;
        }
        refs.sort_by_key(|r| r.1);
        let mut prefix = 1i64;
        for (k, pre, size) in refs {
            if pre <= 0 || size <= 0 || pre % prefix != 0 {
                return None;
            }
            if pre != prefix {
                dims.push(pre / prefix);
            }
            grouped[k] = dims.len() as i64;
            dims.push(size);
            prefix = pre.checked_mul(size)?;
        }
        if full % prefix != 0 {
            return None;
        }
        if prefix != *full {
            dims.push(full / prefix);
        }
    }
    grouped.iter().all(|&g| g >= 0).then_some((dims, grouped))
}

/// `metadata={...}`. Known fields are typed; unknown ones are kept verbatim.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metadata {
    pub op_type: Option<String>,
    pub op_name: Option<String>,
    pub source_file: Option<String>,
    pub source_line: Option<i64>,
    pub source_end_line: Option<i64>,
    pub source_column: Option<i64>,
    pub source_end_column: Option<i64>,
    pub profile_type: Option<Vec<i64>>,
    pub deduplicated_name: Option<String>,
    pub scheduling_name: Option<String>,
    pub stack_frame_id: Option<i64>,
    pub preserve_layout: Option<bool>,
    /// Other `key=value` pairs, value text verbatim.
    pub extra: Vec<(String, String)>,
}

/// An attribute on an instruction: its name as written and its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Attr {
    /// Known names are `'static` (no allocation); others are owned.
    pub name: std::borrow::Cow<'static, str>,
    pub value: AttrValue,
}

/// Sets attribute `name` of `attrs` to `value`, adding it when absent.
pub fn set_attr(attrs: &mut Vec<Attr>, name: &'static str, value: AttrValue) {
    match attrs.iter_mut().find(|a| a.name == name) {
        Some(a) => a.value = value,
        None => attrs.push(Attr {
            name: std::borrow::Cow::Borrowed(name),
            value,
        }),
    }
}

/// Order in which XLA prints attributes (HLO_GRAMMAR §8); lower prints first.
/// Unknown attributes keep their relative order after the opcode-specific ones.
pub fn print_rank(name: &str) -> u32 {
    match name {
        "condition"
        | "body"
        | "to_apply"
        | "calls"
        | "select"
        | "scatter"
        | "true_computation"
        | "false_computation"
        | "branch_computations"
        | "called_computations" => 50,
        "sharding" => 60,
        "parameter_replication" => 61,
        "frontend_attributes" => 62,
        "control-predecessors" => 63,
        "origin" => 64,
        "result_accuracy" => 65,
        "statistics" => 66,
        "metadata" => 70,
        "backend_config" => 80,
        _ => 10,
    }
}
