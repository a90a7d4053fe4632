//! tpusim's IR as XLA's `HloProto`: what a TPU profile carries for each
//! program in its `/host:metadata` plane, and what xprof's graph viewer and
//! memory viewer read. Every instruction keeps its name, opcode, shape (with a
//! layout: the module's, else XLA's default descending one), operands, called
//! computations, metadata, backend config and the attributes XLA's
//! `HloInstruction::CreateFromProto` needs for its opcode.

use std::collections::HashMap;
use tpusim_hlo::{
    attr::Metadata, ArrayShape, AttrValue, CompId, InstrId, Module, Opcode, PrimitiveType, Shape,
};
use tpusim_perf::MemoryProfile;
use tpusim_xla_proto as xp;

/// The proto id of an instruction (XLA ids are unique within a module).
fn instr_id(id: InstrId) -> i64 {
    id.index() as i64 + 1
}

fn comp_id(id: CompId) -> i64 {
    id.index() as i64 + 1
}

fn element_type(ty: PrimitiveType) -> i32 {
    let upper = ty.name().to_ascii_uppercase();
    let name = match upper.as_str() {
        "OPAQUE" => "OPAQUE_TYPE",
        other => other,
    };
    xp::PrimitiveType::from_str_name(name)
        .unwrap_or(xp::PrimitiveType::Invalid)
        .into()
}

fn array_shape(a: &ArrayShape) -> xp::ShapeProto {
    let layout = match &a.layout {
        Some(l) => xp::LayoutProto {
            minor_to_major: l.minor_to_major.clone(),
            tiles: l
                .tiles
                .iter()
                .map(|t| xp::TileProto {
                    dimensions: t.clone(),
                })
                .collect(),
            element_size_in_bits: l
                .attrs
                .as_ref()
                .and_then(|x| x.element_size_bits)
                .unwrap_or(0),
            memory_space: l.attrs.as_ref().and_then(|x| x.memory_space).unwrap_or(0),
            tail_padding_alignment_in_elements: l
                .attrs
                .as_ref()
                .and_then(|x| x.tail_padding_alignment)
                .unwrap_or(1),
            ..xp::LayoutProto::default()
        },
        // XLA's default layout: the last dimension is the most minor.
        None => xp::LayoutProto {
            minor_to_major: (0..a.dims.len() as i64).rev().collect(),
            tail_padding_alignment_in_elements: 1,
            ..xp::LayoutProto::default()
        },
    };
    let has_layout = !matches!(a.ty, PrimitiveType::Token | PrimitiveType::Opaque);
    xp::ShapeProto {
        element_type: element_type(a.ty),
        dimensions: a.dims.clone(),
        // XLA lists one flag per dimension, dynamic or not.
        is_dynamic_dimension: if a.dynamic.is_empty() {
            vec![false; a.dims.len()]
        } else {
            a.dynamic.clone()
        },
        tuple_shapes: Vec::new(),
        layout: has_layout.then_some(layout),
    }
}

/// A shape as `xla.ShapeProto`.
pub fn shape_proto(s: &Shape) -> xp::ShapeProto {
    match s {
        Shape::Array(a) => array_shape(a),
        Shape::Tuple(elems) => xp::ShapeProto {
            element_type: xp::PrimitiveType::Tuple.into(),
            tuple_shapes: elems.iter().map(shape_proto).collect(),
            ..xp::ShapeProto::default()
        },
        Shape::Buffer(inner) => xp::ShapeProto {
            element_type: xp::PrimitiveType::Buffer.into(),
            tuple_shapes: vec![shape_proto(inner)],
            ..xp::ShapeProto::default()
        },
    }
}

fn metadata(md: &Metadata) -> xp::OpMetadata {
    let int = |v: Option<i64>| v.and_then(|x| i32::try_from(x).ok()).unwrap_or(0);
    xp::OpMetadata {
        op_type: md.op_type.clone().unwrap_or_default(),
        op_name: md.op_name.clone().unwrap_or_default(),
        source_file: md.source_file.clone().unwrap_or_default(),
        source_line: int(md.source_line),
        source_end_line: int(md.source_end_line),
        source_column: int(md.source_column),
        source_end_column: int(md.source_end_column),
        deduplicated_name: md.deduplicated_name.clone().unwrap_or_default(),
        stack_frame_id: int(md.stack_frame_id),
        scheduling_name: md.scheduling_name.clone().unwrap_or_default(),
    }
}

/// The computations an instruction calls, in XLA's order (a while loop's
/// body comes before its condition, unlike the text's `condition=, body=`).
fn called(m: &Module, id: InstrId) -> Vec<i64> {
    let ins = m.instr(id);
    if ins.opcode == Opcode::While {
        let body = ins.attr_comp("body");
        let cond = ins.attr_comp("condition");
        return body.into_iter().chain(cond).map(comp_id).collect();
    }
    if matches!(
        ins.opcode,
        Opcode::AsyncStart | Opcode::AsyncUpdate | Opcode::AsyncDone
    ) {
        // XLA: every op of an async chain calls just the wrapped computation
        // (the wrapped op's own `to_apply` lives inside it).
        return m.async_callee(id).map(comp_id).into_iter().collect();
    }
    ins.called_computations().into_iter().map(comp_id).collect()
}

fn ints(ins: &tpusim_hlo::Instruction, name: &str) -> Vec<i64> {
    ins.attr_ints(name).map(<[i64]>::to_vec).unwrap_or_default()
}

fn instruction(m: &Module, id: InstrId) -> xp::HloInstructionProto {
    let ins = m.instr(id);
    let mut p = xp::HloInstructionProto {
        name: ins.name.clone(),
        opcode: ins.opcode.name().to_string(),
        shape: Some(shape_proto(&ins.shape)),
        id: instr_id(id),
        operand_ids: ins.operands.iter().map(|&o| instr_id(o)).collect(),
        called_computation_ids: called(m, id),
        parameter_number: ins.parameter_number.unwrap_or(0),
        // XLA writes an (empty) OpMetadata for every instruction.
        metadata: Some(ins.metadata().map(metadata).unwrap_or_default()),
        // XLA reads 0 as "unset" for these two and the verifier wants >= 1.
        feature_group_count: ins.attr_int("feature_group_count").unwrap_or(1),
        batch_group_count: ins.attr_int("batch_group_count").unwrap_or(1),
        ..xp::HloInstructionProto::default()
    };
    for a in &ins.attrs {
        set_attr(&mut p, ins, &a.name, &a.value);
    }
    if ins.opcode == Opcode::Outfeed {
        // XLA rebuilds an outfeed from the shape of the data it sends.
        p.outfeed_shape = ins
            .operands
            .first()
            .map(|&o| shape_proto(&m.instr(o).shape));
    }
    p
}

/// Moves one HLO text attribute into its proto field; attributes the proto
/// has no field for (shardings, frontend attributes kept raw, ...) stay out.
fn set_attr(
    p: &mut xp::HloInstructionProto,
    ins: &tpusim_hlo::Instruction,
    name: &str,
    v: &AttrValue,
) {
    match (name, v) {
        ("dimensions", AttrValue::Ints(d)) => p.dimensions = d.clone(),
        ("iota_dimension" | "dimensions", AttrValue::Int(d)) => p.dimensions = vec![*d],
        ("index", AttrValue::Int(i)) => p.tuple_index = *i,
        ("kind", AttrValue::Ident(k)) => p.fusion_kind = k.clone(),
        ("direction", AttrValue::Ident(d)) => p.comparison_direction = d.clone(),
        ("type", AttrValue::Ident(t)) => p.comparison_type = t.clone(),
        ("slice", AttrValue::Slice(s)) => {
            p.slice_dimensions = s
                .iter()
                .map(|d| xp::hlo_instruction_proto::SliceDimensions {
                    start: d.start,
                    limit: d.limit,
                    stride: d.stride,
                })
                .collect()
        }
        ("dynamic_slice_sizes", AttrValue::Ints(d)) => p.dynamic_slice_sizes = d.clone(),
        ("slice_sizes", AttrValue::Ints(d)) => p.gather_slice_sizes = d.clone(),
        ("padding", AttrValue::Padding(pads)) => {
            p.padding_config = Some(xp::PaddingConfig {
                dimensions: pads
                    .iter()
                    .map(|d| xp::padding_config::PaddingConfigDimension {
                        edge_padding_low: d.low,
                        edge_padding_high: d.high,
                        interior_padding: d.interior,
                    })
                    .collect(),
            })
        }
        ("window", AttrValue::Window(w)) => {
            p.window = Some(xp::Window {
                dimensions: w
                    .dims
                    .iter()
                    .map(|d| xp::WindowDimension {
                        size: d.size,
                        stride: d.stride,
                        padding_low: d.padding_low,
                        padding_high: d.padding_high,
                        window_dilation: d.window_dilation,
                        base_dilation: d.base_dilation,
                        window_reversal: d.reversal,
                    })
                    .collect(),
            })
        }
        ("dim_labels", AttrValue::DimLabels(l)) => {
            p.convolution_dimension_numbers = Some(xp::ConvolutionDimensionNumbers {
                input_batch_dimension: l.input_batch,
                input_feature_dimension: l.input_feature,
                input_spatial_dimensions: l.input_spatial.clone(),
                kernel_input_feature_dimension: l.kernel_input_feature,
                kernel_output_feature_dimension: l.kernel_output_feature,
                kernel_spatial_dimensions: l.kernel_spatial.clone(),
                output_batch_dimension: l.output_batch,
                output_feature_dimension: l.output_feature,
                output_spatial_dimensions: l.output_spatial.clone(),
            })
        }
        ("lhs_contracting_dims", _) if p.dot_dimension_numbers.is_none() => {
            let dims = xp::DotDimensionNumbers {
                lhs_contracting_dimensions: ints(ins, "lhs_contracting_dims"),
                rhs_contracting_dimensions: ints(ins, "rhs_contracting_dims"),
                lhs_batch_dimensions: ints(ins, "lhs_batch_dims"),
                rhs_batch_dimensions: ints(ins, "rhs_batch_dims"),
            };
            // A ragged dot keeps its dot dimensions inside its own numbers.
            if ins.opcode == Opcode::RaggedDot {
                p.ragged_dot_dimension_numbers = Some(xp::RaggedDotDimensionNumbers {
                    dot_dimension_numbers: Some(dims.clone()),
                    lhs_ragged_dimensions: ints(ins, "lhs_ragged_dims"),
                    rhs_group_dimensions: ints(ins, "rhs_group_dims"),
                });
            }
            p.dot_dimension_numbers = Some(dims);
        }
        ("offset_dims", _) => {
            p.gather_dimension_numbers = Some(xp::GatherDimensionNumbers {
                offset_dims: ints(ins, "offset_dims"),
                collapsed_slice_dims: ints(ins, "collapsed_slice_dims"),
                start_index_map: ints(ins, "start_index_map"),
                index_vector_dim: ins.attr_int("index_vector_dim").unwrap_or(0),
                operand_batching_dims: ints(ins, "operand_batching_dims"),
                start_indices_batching_dims: ints(ins, "start_indices_batching_dims"),
            })
        }
        ("update_window_dims", _) => {
            p.scatter_dimension_numbers = Some(xp::ScatterDimensionNumbers {
                update_window_dims: ints(ins, "update_window_dims"),
                inserted_window_dims: ints(ins, "inserted_window_dims"),
                scatter_dims_to_operand_dims: ints(ins, "scatter_dims_to_operand_dims"),
                index_vector_dim: ins.attr_int("index_vector_dim").unwrap_or(0),
                input_batching_dims: ints(ins, "input_batching_dims"),
                scatter_indices_batching_dims: ints(ins, "scatter_indices_batching_dims"),
            })
        }
        ("replica_groups", AttrValue::ReplicaGroups(g)) => {
            p.replica_groups = g
                .expand()
                .into_iter()
                .map(|replica_ids| xp::ReplicaGroup { replica_ids })
                .collect()
        }
        ("replica_groups", AttrValue::IntLists(g)) => {
            p.replica_groups = g
                .iter()
                .map(|ids| xp::ReplicaGroup {
                    replica_ids: ids.clone(),
                })
                .collect()
        }
        ("source_target_pairs", AttrValue::IntLists(pairs)) => {
            p.source_target_pairs = pairs
                .iter()
                .filter_map(|st| match st.as_slice() {
                    [s, t] => Some(xp::SourceTarget {
                        source: *s,
                        target: *t,
                    }),
                    _ => None,
                })
                .collect()
        }
        ("channel_id", AttrValue::Int(c)) => p.channel_id = *c,
        ("use_global_device_ids", AttrValue::Bool(b)) => p.use_global_device_ids = *b,
        ("constrain_layout", AttrValue::Bool(b)) => p.constrain_layout = *b,
        ("is_stable", AttrValue::Bool(b)) => p.is_stable = *b,
        ("indices_are_sorted", AttrValue::Bool(b)) => p.indices_are_sorted = *b,
        ("unique_indices", AttrValue::Bool(b)) => p.unique_indices = *b,
        ("largest", AttrValue::Bool(b)) => p.largest = *b,
        ("k", AttrValue::Int(k)) => p.k = *k,
        ("custom_call_has_side_effect", AttrValue::Bool(b)) => p.custom_call_has_side_effect = *b,
        ("is_host_transfer", AttrValue::Bool(b)) => p.is_host_transfer = *b,
        ("custom_call_target", AttrValue::Str(t) | AttrValue::Ident(t)) => {
            p.custom_call_target = t.clone()
        }
        ("backend_config", AttrValue::Str(t) | AttrValue::Raw(t)) => {
            p.backend_config = t.clone().into_bytes()
        }
        ("exponent_bits", AttrValue::Int(b)) => p.exponent_bits = *b as i32,
        ("mantissa_bits", AttrValue::Int(b)) => p.mantissa_bits = *b as i32,
        ("epsilon", AttrValue::Float(e)) => p.epsilon = *e as f32,
        ("feature_index", AttrValue::Int(f)) => p.feature_index = *f,
        ("fft_length", AttrValue::Ints(l)) => p.fft_length = l.clone(),
        ("fft_type", AttrValue::Ident(t)) => {
            p.fft_type = xp::FftType::from_str_name(t)
                .unwrap_or(xp::FftType::Fft)
                .into()
        }
        ("distribution", AttrValue::Ident(d)) => {
            p.distribution = match d.as_str() {
                "rng_normal" => xp::RandomDistribution::RngNormal,
                _ => xp::RandomDistribution::RngUniform,
            }
            .into()
        }
        ("algorithm", AttrValue::Ident(a)) => {
            p.rng_algorithm = match a.as_str() {
                "rng_three_fry" => xp::RandomAlgorithm::RngThreeFry,
                "rng_philox" => xp::RandomAlgorithm::RngPhilox,
                _ => xp::RandomAlgorithm::RngDefault,
            }
            .into()
        }
        ("delta", AttrValue::Int(d)) => p.delta = *d,
        ("outfeed_config", AttrValue::Str(c)) => p.outfeed_config = c.clone().into_bytes(),
        ("infeed_config", AttrValue::Str(c)) => p.infeed_config = c.clone().into_bytes(),
        ("is_composite", AttrValue::Bool(b)) => p.is_composite = *b,
        ("frontend_attributes", AttrValue::FrontendAttrs(attrs)) => {
            p.frontend_attributes = Some(xp::FrontendAttributes {
                map: attrs
                    .iter()
                    .map(|(k, v)| {
                        let v = match v {
                            tpusim_hlo::attr::FrontendValue::Str(s)
                            | tpusim_hlo::attr::FrontendValue::Raw(s) => s.clone(),
                        };
                        (k.clone(), v)
                    })
                    .collect(),
            })
        }
        _ => {}
    }
}

fn stack_frame_index(s: &tpusim_hlo::ir::StackFrameIndex) -> xp::StackFrameIndexProto {
    let int = |v: i64| i32::try_from(v).unwrap_or(0);
    xp::StackFrameIndexProto {
        file_names: s.file_names.clone(),
        function_names: s.function_names.clone(),
        file_locations: s
            .file_locations
            .iter()
            .map(|l| xp::stack_frame_index_proto::FileLocation {
                file_name_id: int(l.file_name_id),
                function_name_id: int(l.function_name_id),
                line: int(l.line),
                column: int(l.column),
            })
            .collect(),
        stack_frames: s
            .stack_frames
            .iter()
            .map(|f| xp::stack_frame_index_proto::StackFrame {
                file_location_id: int(f.file_location_id),
                // The text prints one more than the parent's position.
                parent_frame_id: int(f.parent_frame_id - 1).max(0),
            })
            .collect(),
    }
}

/// XLA wants instruction names unique in the module; the parameters of the
/// computations tpusim makes for async sugar can repeat names (`param_0`).
/// A repeat gets XLA's uniquifier suffix (`param_0.1`, ...).
fn uniquify_names(comps: &mut [xp::HloComputationProto]) {
    let mut taken: std::collections::HashSet<String> = comps
        .iter()
        .flat_map(|c| &c.instructions)
        .map(|i| i.name.clone())
        .collect();
    let mut seen = std::collections::HashSet::new();
    for i in comps.iter_mut().flat_map(|c| c.instructions.iter_mut()) {
        if seen.insert(i.name.clone()) {
            continue;
        }
        let mut k = 1;
        while taken.contains(&format!("{}.{k}", i.name)) {
            k += 1;
        }
        i.name = format!("{}.{k}", i.name);
        taken.insert(i.name.clone());
        seen.insert(i.name.clone());
    }
}

/// Computations reachable from the entry, callees before callers (the order
/// `HloModule::CreateFromProto` needs).
fn post_order(m: &Module) -> Vec<CompId> {
    let mut order = Vec::new();
    let mut seen = vec![false; m.comps.len()];
    // (computation, children pushed?) — iterative, so deep call chains
    // cannot overflow the stack.
    let mut stack = vec![(m.entry, false)];
    while let Some((c, expanded)) = stack.pop() {
        if expanded {
            order.push(c);
            continue;
        }
        if seen[c.index()] {
            continue;
        }
        seen[c.index()] = true;
        stack.push((c, true));
        for &i in m.comp(c).instrs.iter().rev() {
            for callee in m.instr(i).called_computations().into_iter().rev() {
                if !seen[callee.index()] {
                    stack.push((callee, false));
                }
            }
        }
    }
    order
}

fn program_shape(m: &Module, c: CompId) -> xp::ProgramShapeProto {
    let comp = m.comp(c);
    xp::ProgramShapeProto {
        parameters: comp
            .params
            .iter()
            .map(|&p| shape_proto(&m.instr(p).shape))
            .collect(),
        result: Some(shape_proto(&m.instr(comp.root).shape)),
        parameter_names: comp
            .params
            .iter()
            .map(|&p| m.instr(p).name.clone())
            .collect(),
    }
}

/// The entry's signature as XLA's module config records it (parameters
/// named `p0`, `p1`, ...).
fn host_program_shape(m: &Module) -> xp::ProgramShapeProto {
    let mut shape = program_shape(m, m.entry);
    shape.parameter_names = (0..shape.parameters.len())
        .map(|k| format!("p{k}"))
        .collect();
    shape
}

/// The module as `xla.HloModuleProto` (id `program_id`), with its schedule
/// when the module is scheduled.
pub fn module_proto(m: &Module, program_id: i64) -> xp::HloModuleProto {
    let fusion_bodies: std::collections::HashSet<CompId> = m
        .instrs
        .iter()
        .filter(|i| i.opcode == Opcode::Fusion)
        .flat_map(|i| i.called_computations())
        .collect();
    let mut computations = Vec::new();
    let mut schedule = std::collections::BTreeMap::new();
    for c in post_order(m) {
        let comp = m.comp(c);
        let is_fusion = fusion_bodies.contains(&c);
        if !is_fusion {
            schedule.insert(
                comp_id(c),
                xp::hlo_schedule_proto::InstructionSequence {
                    instruction_ids: comp.instrs.iter().map(|&i| instr_id(i)).collect(),
                },
            );
        }
        computations.push(xp::HloComputationProto {
            name: comp.name.clone(),
            instructions: comp.instrs.iter().map(|&i| instruction(m, i)).collect(),
            program_shape: Some(program_shape(m, c)),
            id: comp_id(c),
            root_id: instr_id(comp.root),
            is_fusion_computation: is_fusion,
            execution_thread: comp
                .execution_thread
                .clone()
                .unwrap_or_else(|| "main".to_string()),
        });
    }
    uniquify_names(&mut computations);
    let aliases = m
        .config
        .input_output_alias
        .iter()
        .map(|a| xp::hlo_input_output_alias_proto::AliasEntryProto {
            output_shape_index: a.output_index.clone(),
            parameter_number: a.parameter,
            parameter_shape_index: a.parameter_index.clone(),
            kind: match a.kind.as_deref() {
                Some("must-alias") => xp::Kind::MustAlias,
                _ => xp::Kind::MayAlias,
            }
            .into(),
        })
        .collect();
    xp::HloModuleProto {
        name: m.name.clone(),
        entry_computation_name: m.entry().name.clone(),
        entry_computation_id: comp_id(m.entry),
        computations,
        host_program_shape: Some(host_program_shape(m)),
        id: program_id,
        schedule: (m.config.is_scheduled == Some(true)).then_some(xp::HloScheduleProto {
            sequences: schedule,
        }),
        input_output_alias: Some(xp::HloInputOutputAliasProto { entries: aliases }),
        stack_frame_index: m.stack_frames.as_ref().map(stack_frame_index),
        ..xp::HloModuleProto::default()
    }
}

/// The buffer assignment xprof's memory viewer reads, from tpusim's
/// simulated allocator. As XLA assigns it: each entry parameter and constant
/// in its own allocation, every other buffer at an offset within one heap
/// allocation, and the heap simulator's trace of those buffers' allocs and
/// frees in time order (offsets by first fit over the buffers live at once).
pub fn buffer_assignment(m: &Module, mem: &MemoryProfile) -> xp::BufferAssignmentProto {
    let by_name: HashMap<&str, InstrId> = m
        .instrs
        .iter()
        .enumerate()
        .map(|(k, i)| (i.name.as_str(), InstrId(k as u32)))
        .collect();
    let mut logical = Vec::new();
    let mut allocations = Vec::new();
    // (replay record, is_free, logical buffer id, size, instruction name)
    let mut events: Vec<(u64, bool, i64, i64, &str)> = Vec::new();
    for (k, a) in mem.allocations.iter().enumerate() {
        // A leaf of a tuple result is named `name{leaf}` (its depth-first
        // leaf number); the proto locates it by the leaf's shape index.
        let (name, leaf) = match a.buffer.name.split_once('{') {
            Some((name, rest)) => (name, rest.trim_end_matches('}').parse::<usize>().ok()),
            None => (a.buffer.name.as_str(), None),
        };
        let Some(&instr) = by_name.get(name) else {
            continue;
        };
        let id = k as i64;
        let size = a.buffer.bytes as i64;
        let shape_index = leaf
            .and_then(|leaf| leaf_shape_index(&m.instr(instr).shape, leaf))
            .unwrap_or_default();
        logical.push(xp::LogicalBufferProto {
            id,
            size,
            defined_at: Some(xp::logical_buffer_proto::Location {
                instruction_id: instr_id(instr),
                shape_index,
                ..Default::default()
            }),
            color: 0,
        });
        let ins = m.instr(instr);
        let is_param = ins.opcode == Opcode::Parameter && ins.parent == m.entry;
        let is_constant = ins.opcode == Opcode::Constant;
        if is_param || is_constant {
            allocations.push(xp::BufferAllocationProto {
                index: allocations.len() as i64,
                size,
                is_entry_computation_parameter: is_param,
                is_constant,
                parameter_number: ins.parameter_number.filter(|_| is_param).unwrap_or(0),
                maybe_live_out: a.free_s.is_none(),
                assigned: vec![xp::buffer_allocation_proto::Assigned {
                    logical_buffer_id: id,
                    offset: 0,
                    size,
                }],
                ..Default::default()
            });
            continue;
        }
        if a.free_seq == Some(a.alloc_seq) {
            // Freed in the record it was made in: never live, no heap events
            // (its free would sort before its own alloc).
            continue;
        }
        events.push((a.alloc_seq, false, id, size, ins.name.as_str()));
        events.push((
            a.free_seq.unwrap_or(u64::MAX),
            true,
            id,
            size,
            ins.name.as_str(),
        ));
    }
    // In the replay's order; frees before allocs in one record, as the
    // allocator counts them.
    events.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let heap_index = allocations.len() as i64;
    let (assigned, heap_size) = first_fit(&events);
    allocations.push(xp::BufferAllocationProto {
        index: heap_index,
        size: heap_size,
        assigned,
        ..Default::default()
    });
    let entry = m.entry().name.clone();
    let trace = xp::HeapSimulatorTrace {
        events: events
            .iter()
            .filter(|e| e.0 != u64::MAX || !e.1)
            .map(|&(_, free, id, _, name)| xp::heap_simulator_trace::Event {
                kind: if free {
                    xp::heap_simulator_trace::event::Kind::Free
                } else {
                    xp::heap_simulator_trace::event::Kind::Alloc
                }
                .into(),
                buffer_id: id,
                computation_name: entry.clone(),
                instruction_name: name.to_string(),
                share_with_canonical_id: 0,
            })
            .collect(),
        whole_module_simulation: true,
        buffer_allocation_index: heap_index,
    };
    xp::BufferAssignmentProto {
        logical_buffers: logical,
        buffer_aliases: Vec::new(),
        buffer_allocations: allocations,
        heap_simulator_traces: vec![trace],
    }
}

/// The shape index of the `leaf`-th array leaf of `shape` (depth first),
/// `None` past its last leaf. Walks with an explicit stack: the nesting
/// depth comes from the input.
fn leaf_shape_index(shape: &Shape, leaf: usize) -> Option<Vec<i64>> {
    let mut seen = 0usize;
    // (shape, its index)
    let mut stack: Vec<(&Shape, Vec<i64>)> = vec![(shape, Vec::new())];
    while let Some((s, index)) = stack.pop() {
        match s {
            Shape::Tuple(elements) => {
                for (k, e) in elements.iter().enumerate().rev() {
                    let mut child = index.clone();
                    child.push(k as i64);
                    stack.push((e, child));
                }
            }
            _ => {
                if seen == leaf {
                    return Some(index);
                }
                seen += 1;
            }
        }
    }
    None
}

/// Offsets for the heap's buffers: each alloc takes the lowest gap between
/// the buffers live at that moment that fits it. Returns the assignments and
/// the heap's size (the highest end).
fn first_fit(
    events: &[(u64, bool, i64, i64, &str)],
) -> (Vec<xp::buffer_allocation_proto::Assigned>, i64) {
    // Live buffers as (offset, size, id), ordered by offset.
    let mut live: Vec<(i64, i64, i64)> = Vec::new();
    let mut assigned = Vec::new();
    let mut heap = 0i64;
    for &(_, free, id, size, _) in events {
        if free {
            live.retain(|&(_, _, l)| l != id);
            continue;
        }
        let mut offset = 0i64;
        let mut slot = live.len();
        for (k, &(o, s, _)) in live.iter().enumerate() {
            if o - offset >= size {
                slot = k;
                break;
            }
            offset = offset.max(o + s);
        }
        live.insert(slot, (offset, size, id));
        heap = heap.max(offset + size);
        assigned.push(xp::buffer_allocation_proto::Assigned {
            logical_buffer_id: id,
            offset,
            size,
        });
    }
    (assigned, heap)
}

/// The `HloProto` of a simulated module: the program and, when the run
/// has a memory profile, its buffer assignment.
pub fn hlo_proto(m: &Module, program_id: i64, mem: Option<&MemoryProfile>) -> xp::HloProto {
    xp::HloProto {
        hlo_module: Some(module_proto(m, program_id)),
        buffer_assignment: mem.map(|mem| buffer_assignment(m, mem)),
    }
}
