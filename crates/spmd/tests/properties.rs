//! Property: resharding between any two shardings of an array (even or uneven
//! dims, any assignment of a 2x2x2 mesh's axes to its dims, in any order)
//! moves data and nothing else: the partitioned identity program, run on 8
//! simulated devices, returns its input.

use proptest::prelude::*;
use tpusim_interp::{Array, GlobalRun, Value};
use tpusim_spmd::mesh::{Mesh, Sh};
use tpusim_spmd::{partition, PartitionOptions};

/// A sharding of a rank-2 array: each of the 3 factor axes goes to dim 0,
/// dim 1 or nowhere, in a random order.
fn sharding() -> impl Strategy<Value = Sh> {
    (
        prop::collection::vec(0usize..3, 3),
        Just(vec![0u8, 1, 2]).prop_shuffle(),
    )
        .prop_map(|(place, order)| {
            let mut sh = Sh::replicated(2);
            for a in order {
                if place[a as usize] < 2 {
                    sh.dims[place[a as usize]].push(a);
                }
            }
            sh
        })
}

fn text(sh: &Sh, mesh: &Mesh) -> String {
    let m = tpusim_hlo::parse_module("HloModule s\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n")
        .unwrap();
    let mut out = String::new();
    tpusim_hlo::printer::write_attr_value(
        &mut out,
        &m,
        &tpusim_hlo::AttrValue::Sharding(Box::new(tpusim_hlo::attr::Sharding::Single(
            sh.to_hlo(mesh),
        ))),
    );
    out
}

proptest! {
    #![proptest_config(proptest::test_runner::Config {
        cases: 24,
        // A fixed seed: CI runs exactly the cases that ran here.
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x7195_5EED),
        ..proptest::test_runner::Config::default()
    })]
    #[test]
    fn resharding_preserves_values(from in sharding(), to in sharding(), d0 in 5i64..9, d1 in 3i64..9) {
        let mesh = Mesh::new(vec![("devices".into(), 8)]);
        let hlo = format!(
            "HloModule r, num_partitions=1\nENTRY e {{\n  p = f32[{d0},{d1}] parameter(0), sharding={}\n  ROOT c = f32[{d0},{d1}] copy(p), sharding={}\n}}\n",
            text(&from, &mesh),
            text(&to, &mesh)
        );
        let m = tpusim_hlo::parse_module(&hlo).unwrap();
        let p = partition(&m, &PartitionOptions { num_devices: Some(8), ..Default::default() }).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let dims = vec![d0 as usize, d1 as usize];
        let vals: Vec<f32> = (0..d0 * d1).map(|v| v as f32).collect();
        let input = Array::from_f32s(tpusim_hlo::PrimitiveType::F32, dims.clone(), vals.clone());
        let opts = GlobalRun { output_dims: Some(vec![dims.clone()]), ..Default::default() };
        let out = tpusim_interp::run_global(&p, vec![Value::Array(input)], &opts)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{}", tpusim_hlo::print_module(&p))))?;
        let got = out[0].as_array().unwrap().to_f32s();
        prop_assert_eq!(got, vals, "{}", tpusim_hlo::print_module(&p));
    }
}
