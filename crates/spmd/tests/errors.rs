//! Bad input gets a clear error naming the instruction and the sharding, never a
//! panic or a silently unpartitioned module.

use tpusim_spmd::{partition, PartitionOptions, SpmdError};

fn partition_text(text: &str, devices: Option<u32>) -> Result<tpusim_hlo::Module, SpmdError> {
    let m = tpusim_hlo::parse_module(text).expect("test module parses");
    partition(
        &m,
        &PartitionOptions {
            num_devices: devices,
            ..Default::default()
        },
    )
}

const MESH_2X4: &str =
    r#"frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<["data"=2, "model"=4]>}}"#;

#[test]
fn tile_count_other_than_the_device_count_names_instruction_and_sharding() {
    let text = format!(
        "HloModule m, {MESH_2X4}\nENTRY e {{\n  x.1 = f32[8,8] parameter(0), sharding={{devices=[4,1]<=[4]}}\n  ROOT n = f32[8,8] negate(x.1)\n}}\n"
    );
    let msg = four_tiles_on_eight_devices(&text);
    assert!(
        msg.contains("x.1") && msg.contains("devices=[4,1]"),
        "{msg}"
    );
}

#[test]
fn asking_for_another_device_count_is_an_error() {
    // Without a mesh: the sharding's tile count is checked.
    let text = "HloModule m\nENTRY e {\n  x.1 = f32[8,8] parameter(0), sharding={devices=[8,1]<=[8]}\n  ROOT n = f32[8,8] negate(x.1)\n}\n";
    let e = partition_text(text, Some(4)).unwrap_err();
    assert!(
        matches!(
            e,
            SpmdError::TileCount {
                devices: 4,
                tiles: 8,
                ..
            }
        ),
        "{e}"
    );
    // With a Shardy mesh: the mesh's size is.
    let text = format!(
        "HloModule m, {MESH_2X4}\nENTRY e {{\n  x.1 = f32[8,8] parameter(0), sharding={{devices=[8,1]<=[8]}}\n  ROOT n = f32[8,8] negate(x.1)\n}}\n"
    );
    let e = partition_text(&text, Some(4)).unwrap_err();
    assert!(
        matches!(&e, SpmdError::Mesh(why) if why.contains("data=2 x model=4")),
        "{e}"
    );
}

#[test]
fn unknown_mesh_axis_is_named() {
    let text = format!(
        "HloModule m, {MESH_2X4}\nENTRY e {{\n  x.1 = f32[8,8] parameter(0), sharding={{devices=[2,1,4]<=[8] last_tile_dim_replicate}}, frontend_attributes={{xla.sdy.sharding=\"#sdy.sharding<@mesh, [{{\\\"batch\\\"}}, {{}}]>\"}}\n  ROOT n = f32[8,8] negate(x.1)\n}}\n"
    );
    let e = partition_text(&text, None).unwrap_err();
    match &e {
        SpmdError::UnknownAxis { instr, axis, .. } => {
            assert_eq!(instr, "x.1");
            assert_eq!(axis, "batch");
        }
        other => panic!("expected UnknownAxis, got {other}"),
    }
    assert!(e.to_string().contains("data=2"), "{e}");
}

#[test]
fn nested_manual_regions_over_the_same_axis_conflict() {
    let manual = r##"frontend_attributes={xla.sdy.in_shardings="#sdy.sharding_per_value<[<@mesh, [{\"data\"}, {}]>]>",xla.sdy.manual_axes="#sdy<manual_axes{\"data\"}>"}"##;
    let text = format!(
        "HloModule m, {MESH_2X4}\nENTRY e {{\n  x.1 = f32[8,8] parameter(0), sharding={{devices=[2,1,4]<=[8] last_tile_dim_replicate}}\n  a.1 = f32[4,8] custom-call(x.1), custom_call_target=\"xla.sdy.GlobalToLocalShape\", {manual}\n  ROOT b.1 = f32[2,8] custom-call(a.1), custom_call_target=\"xla.sdy.GlobalToLocalShape\", {manual}\n}}\n"
    );
    let e = partition_text(&text, None).unwrap_err();
    match &e {
        SpmdError::ConflictingManual { instr, why } => {
            assert_eq!(instr, "b.1");
            assert!(why.contains("data"), "{why}");
        }
        other => panic!("expected ConflictingManual, got {other}"),
    }
}

#[test]
fn host_io_in_a_sharded_module_is_unsupported_not_dropped() {
    let text = format!(
        "HloModule m, {MESH_2X4}\nENTRY e {{\n  x.1 = f32[8,8] parameter(0), sharding={{devices=[8,1]<=[8]}}\n  tok = token[] after-all()\n  inf = ((f32[8,8]), token[]) infeed(tok)\n  ROOT n = f32[8,8] negate(x.1)\n}}\n"
    );
    let e = partition_text(&text, None).unwrap_err();
    match &e {
        SpmdError::Unsupported { instr, opcode, .. } => {
            assert_eq!(instr, "inf");
            assert_eq!(opcode, "infeed");
        }
        other => panic!("expected Unsupported, got {other}"),
    }
}

#[test]
fn an_irregular_device_order_is_a_sharding_error() {
    let text = format!(
        "HloModule m, {MESH_2X4}\nENTRY e {{\n  x.1 = f32[8,8] parameter(0), sharding={{devices=[8,1]0,3,1,2,4,5,6,7}}\n  ROOT n = f32[8,8] negate(x.1)\n}}\n"
    );
    let e = partition_text(&text, None).unwrap_err();
    assert!(
        matches!(&e, SpmdError::BadSharding { instr, .. } if instr == "x.1"),
        "{e}"
    );
}

/// A partitioned module whose header lost `num_partitions` (as some benchmark
/// dumps do) holds collectives: it is not partitioned a second time.
#[test]
fn modules_that_hold_collectives_are_already_partitioned() {
    let partitioned = "HloModule m\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\nENTRY e {\n  x = f32[2,8] parameter(0), sharding={devices=[4,1]<=[4]}\n  ROOT r = f32[2,8] all-reduce(x), replica_groups={}, to_apply=add\n}\n";
    let m = tpusim_hlo::parse_module(partitioned).expect("parses");
    assert!(!tpusim_spmd::needs_partitioning(&m));
    let unpartitioned = "HloModule m\nENTRY e {\n  x = f32[8,8] parameter(0), sharding={devices=[4,1]<=[4]}\n  ROOT n = f32[8,8] negate(x)\n}\n";
    let m = tpusim_hlo::parse_module(unpartitioned).expect("parses");
    assert!(tpusim_spmd::needs_partitioning(&m));
}

/// Found by the mutation test: an `in_shardings`/`out_shardings` entry of
/// another rank than its value indexed past the sharding's dims.
#[test]
fn shard_map_sharding_of_the_wrong_rank_is_an_error() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/spmd_cases/shard_map_ring_3axis/pre.hlo"
    );
    let text = std::fs::read_to_string(path).expect("read shard_map_ring_3axis");
    assert!(partition_text(&text, None).is_ok());
    let cases = [
        (
            r#"[<@mesh, [{\"a\"}, {\"b\"}, {\"c\"}]>]>"#,
            r#"[<@mesh, [{\"a\"}, {\"b\"}]>]>"#,
            "ranks [2] for values of ranks [3]",
        ),
        (
            r#"[<@mesh, [{}, {}, {\"c\"}]>]>"#,
            r#"[<@mesh, [{}, {}, {}, {\"c\"}]>]>"#,
            "ranks [4] for values of ranks [3]",
        ),
    ];
    for (from, to, want) in cases {
        assert!(text.contains(from), "{from}");
        let e = partition_text(&text.replace(from, to), None).unwrap_err();
        assert!(matches!(e, SpmdError::BadSharding { .. }), "{e}");
        assert!(e.to_string().contains(want), "{e}");
    }
}

/// Found by the mutation test: a `Sharding` custom-call without an operand.
#[test]
fn sharding_custom_call_without_an_operand_is_an_error() {
    let text = "HloModule m, num_partitions=2\nENTRY e {\n  x = f32[4] parameter(0), sharding={devices=[2]<=[2]}\n  s = f32[4] custom-call(), custom_call_target=\"Sharding\", sharding={devices=[2]<=[2]}\n  ROOT a = f32[4] add(x, s)\n}\n";
    let e = partition_text(text, None).unwrap_err();
    assert!(e.to_string().contains("takes one operand, not 0"), "{e}");
}

/// A Shardy mesh whose axis sizes multiply past u32 is refused (the product
/// used to overflow).
#[test]
fn a_mesh_larger_than_u32_is_an_error() {
    let text = "HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"a\"=65536, \"b\"=65536]>}}\nENTRY e {\n  x = f32[4] parameter(0), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, [{\\\"a\\\"}]>\"}\n  ROOT n = f32[4] negate(x)\n}\n";
    let m = tpusim_hlo::parse_module(text).expect("parses");
    let e = tpusim_spmd::mesh_of(&m, &PartitionOptions::default()).unwrap_err();
    assert!(matches!(e, SpmdError::Mesh(_)), "{e}");
    assert!(partition_text(text, None).is_err());
}

#[test]
fn a_set_cancel_flag_stops_partitioning_with_cancelled() {
    let text = format!(
        "HloModule m, {MESH_2X4}\nENTRY e {{\n  x.1 = f32[8,8] parameter(0), sharding={{devices=[8,1]<=[8]}}\n  ROOT n = f32[8,8] negate(x.1)\n}}\n"
    );
    let m = tpusim_hlo::parse_module(&text).expect("test module parses");
    let options = PartitionOptions::default();
    assert!(partition(&m, &options).is_ok());
    options.cancel.cancel();
    assert_eq!(
        partition(&m, &options).unwrap_err(),
        SpmdError::Cancelled(tpusim_hlo::Cancelled)
    );
}

#[test]
fn a_partially_manual_sharding_with_the_wrong_tile_count_names_the_instruction() {
    // XLA's form of a shard_map body over one of two axes: 2 free tiles x 2
    // manual ones on an 8-device module.
    let text = "HloModule m, num_partitions=8\nENTRY e {\n  x.1 = f32[8,8] parameter(0), sharding={devices=[2,1,4]<=[8] last_tile_dim_replicate}\n  ROOT n.1 = f32[8,8] negate(x.1), sharding={devices=[2,1,2]<=[4] last_tile_dims={manual}}\n}\n";
    let msg = four_tiles_on_eight_devices(text);
    assert!(msg.contains("n.1"), "{msg}");
}

/// The message of the tile-count error `text` must fail with: 4 tiles on 8
/// devices.
fn four_tiles_on_eight_devices(text: &str) -> String {
    let e = partition_text(text, None).unwrap_err();
    assert!(
        matches!(
            e,
            SpmdError::TileCount {
                tiles: 4,
                devices: 8,
                ..
            }
        ),
        "{e}"
    );
    e.to_string()
}

/// Found by the pipeline fuzzer: a gather whose batching-dims attribute is
/// misspelled (so its operand and index batching dims do not pair) and whose
/// own sharding is given. Partitioning it toward that sharding must not
/// index past either list: the module partitions or is an error, never a
/// panic.
#[test]
fn a_given_gather_with_unpaired_batching_dims_does_not_panic() {
    let text = r#"HloModule module

ENTRY entry {
  %input = f32[10,3,14,4] parameter(0), sharding={devices=[2,1,2,1]<=[2,2]T(1,0)}
  %indices = s32[14,10,6,2] parameter(1), sharding={devices=[2,2,1,1]<=[4]}
  ROOT %gather = f32[14,10,6,2] gather(%input, %indices), offset_dims={3},
    collapsed_slice_dims={1}, operand_batching_dims={0,2},
    start_indices_batching_Dims={1,0}, start_index_map={1,3},
    index_vector_dim=3, slice_sizes={1,1,1,2}, sharding={devices=[2,2,1,1]<=[4]}
}
"#;
    let outcome = std::panic::catch_unwind(|| partition_text(text, None).map(|_| ()));
    assert!(outcome.is_ok(), "partitioning panicked");
}
