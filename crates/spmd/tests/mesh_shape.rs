//! The logical mesh a pre-partition program numbers its devices by, which the
//! pod model lays on the torus as JAX would: the Shardy mesh when there is one,
//! else the finest mesh all iota device lists reshape.

use tpusim_spmd::{mesh_shape, PartitionOptions};

fn shape_of(text: &str) -> Vec<u32> {
    let m = tpusim_hlo::parse_module(text).expect("test module parses");
    mesh_shape(&m, &PartitionOptions::default()).unwrap()
}

fn module(shardings: &[&str]) -> String {
    let mut body = String::new();
    for (k, s) in shardings.iter().enumerate() {
        body.push_str(&format!(
            "  p{k} = f32[24,24] parameter({k}), sharding={{{s}}}\n"
        ));
    }
    format!("HloModule m\n\nENTRY e {{\n{body}  ROOT t = (f32[24,24]) tuple(p0)\n}}\n")
}

#[test]
fn iota_device_lists_give_the_mesh_they_all_reshape() {
    // 2 x 3 x 4 devices, seen as [6,4], [2,12] and a transposed [2,3,4].
    let text = module(&[
        "devices=[6,4]<=[6,4]",
        "devices=[2,12]<=[2,12]",
        "devices=[1,3,8]<=[2,3,4]T(1,0,2) last_tile_dim_replicate",
    ]);
    assert_eq!(shape_of(&text), vec![2, 3, 4]);
}

#[test]
fn lists_that_do_not_nest_leave_one_axis() {
    // Strides 4 and 6 of 24 devices fit no single mesh.
    let text = module(&["devices=[6,4]<=[6,4]", "devices=[4,6]<=[4,6]"]);
    assert_eq!(shape_of(&text), vec![24]);
    // Explicit device lists say nothing about axes.
    let text = module(&["devices=[2,2]0,2,1,3"]);
    assert_eq!(shape_of(&text), vec![4]);
}

#[test]
fn a_shardy_mesh_is_taken_as_written() {
    let text = r#"HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<["data"=2, "model"=4]>}}
ENTRY e {
  x = f32[8,8] parameter(0), sharding={devices=[8,1]<=[8]}
  ROOT n = f32[8,8] negate(x)
}
"#;
    assert_eq!(shape_of(text), vec![2, 4]);
}
