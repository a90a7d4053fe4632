//! Mesh placement against JAX: every case of testdata/mesh_placement.json
//! (written by tools/gen_mesh_placement.py from JAX's own
//! `_create_device_mesh_for_nd_torus`) must put each mesh position on the same
//! physical coordinates, and refuse the meshes JAX refuses.

use serde::Deserialize;
use tpusim_pod::placement::{lay_mesh, lay_mesh_splitting};
use tpusim_pod::{Pod, PodOptions};

#[derive(Deserialize)]
struct Case {
    physical: Vec<u32>,
    mesh: Vec<u32>,
    coords: Option<Vec<[u32; 3]>>,
    /// With `allow_split_physical_axes=True` (`jax.make_mesh` on v5e).
    split_coords: Option<Vec<[u32; 3]>>,
}

#[derive(Deserialize)]
struct Cases {
    cases: Vec<Case>,
}

fn cases() -> Vec<Case> {
    let text = include_str!("../testdata/mesh_placement.json");
    serde_json::from_str::<Cases>(text).unwrap().cases
}

/// Compares a layout (or a refusal) with JAX's.
fn check(
    label: &str,
    want: &Option<Vec<[u32; 3]>>,
    got: Result<tpusim_pod::placement::MeshLayout, String>,
) {
    match (want, got) {
        (Some(want), Ok(layout)) => {
            let got: Vec<[u32; 3]> = layout.coords.iter().map(|c| [c[0], c[1], c[2]]).collect();
            assert_eq!(&got, want, "{label}");
        }
        (None, Err(_)) => {}
        (Some(_), Err(e)) => panic!("{label}: JAX lays it, tpusim refuses: {e}"),
        (None, Ok(_)) => panic!("{label}: JAX refuses it, tpusim lays it"),
    }
}

#[test]
fn split_meshes_land_where_jax_puts_them() {
    let cases = cases();
    let split_only = cases
        .iter()
        .filter(|c| c.coords.is_none() && c.split_coords.is_some())
        .count();
    assert!(split_only >= 15, "{split_only}");
    for c in cases {
        let label = format!("mesh {:?} on {:?}, splitting axes", c.mesh, c.physical);
        check(
            &label,
            &c.split_coords,
            lay_mesh_splitting(&c.physical, &c.mesh),
        );
    }
}

#[test]
fn meshes_land_where_jax_puts_them() {
    let cases = cases();
    assert!(cases.len() >= 15);
    for c in cases {
        let label = format!("mesh {:?} on {:?}", c.mesh, c.physical);
        check(&label, &c.coords, lay_mesh(&c.physical, &c.mesh));
    }
}

/// The pod turns the layout into device locations, slice by slice.
#[test]
fn a_pod_places_each_slice_alike() {
    let chip = tpusim_arch::by_id("v5p").unwrap();
    let mut pod = Pod::for_chip(&chip, &[4, 4, 8], 2).unwrap();
    // (data 2 over DCN) x fsdp 16 x tensor 8: tensor takes z, fsdp x and y.
    let layout = pod.place_mesh(&[2, 16, 8]).unwrap();
    assert_eq!(layout.axes, vec![vec![], vec![0, 1], vec![2]]);
    let first = pod.place(pod.loc(1).unwrap());
    assert_eq!((first.slice, first.coords), (0, [0, 0, 1]));
    let other_slice = pod.place(pod.loc(128 + 8).unwrap());
    assert_eq!((other_slice.slice, other_slice.coords), (1, [0, 1, 0]));
    // Every location is used once.
    let mut locs: Vec<u32> = (0..256).map(|d| pod.loc(d).unwrap()).collect();
    locs.sort_unstable();
    assert_eq!(locs, (0..256).collect::<Vec<u32>>());
}

/// A mesh JAX cannot lay keeps the torus order, and the analysis says why.
#[test]
fn an_impossible_mesh_is_an_assumption_not_an_error() {
    let chip = tpusim_arch::by_id("v5p").unwrap();
    let m = tpusim_hlo::parse_module(
        "HloModule m, num_partitions=64\n\nadd {\n  x = f32[] parameter(0)\n  \
         y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n\nENTRY e {\n  \
         p = f32[64] parameter(0)\n  \
         ROOT a = f32[64] all-reduce(p), channel_id=1, replica_groups=[1,64]<=[64], use_global_device_ids=true, to_apply=add\n}\n",
    )
    .unwrap();
    for (mesh, laid) in [(vec![4u32, 16], true), (vec![2, 32], false)] {
        let opts = PodOptions {
            topology: Some("4x4x4".into()),
            slices: 1,
            mesh: Some(mesh.clone()),
            ..Default::default()
        };
        let model = opts.model_for(&chip, &m).unwrap().unwrap();
        let note = model.placement.clone().unwrap();
        assert_eq!(note.contains("torus order"), !laid, "{mesh:?}: {note}");
    }
}

/// Splits `n` into `parts` factors from the divisors `pick` chooses.
fn factorize(mut n: u32, picks: &[u32]) -> Vec<u32> {
    let mut mesh = Vec::new();
    for &p in picks {
        let divisors: Vec<u32> = (1..=n).filter(|d| n.is_multiple_of(*d)).collect();
        let d = divisors[p as usize % divisors.len()];
        mesh.push(d);
        n /= d;
    }
    mesh.push(n);
    mesh
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config {
        cases: 256,
        ..Default::default()
    })]

    /// Any mesh of a slice's device count is laid as a one-to-one map onto
    /// the slice when physical axes may be split (and the same way when
    /// they need not be); unsplit, each mesh axis is on physical axes whose
    /// sizes multiply to its own.
    #[test]
    fn a_laid_mesh_is_a_permutation_of_the_slice(
        dims in proptest::collection::vec(proptest::sample::select(vec![1u32, 2, 3, 4, 8, 12, 16]), 3),
        cores in proptest::sample::select(vec![1u32, 2]),
        picks in proptest::collection::vec(0u32..16, 0..4),
    ) {
        let physical = tpusim_pod::placement::physical_axes(&dims, cores);
        let n: u32 = physical.iter().product();
        let mesh = factorize(n, &picks);
        // Splitting physical axes lays every mesh of the right size.
        let split = lay_mesh_splitting(&physical, &mesh);
        proptest::prop_assert!(split.is_ok(), "{:?} on {:?}: {:?}", mesh, physical, split.err());
        let layout = match (lay_mesh(&physical, &mesh), split) {
            (Ok(plain), Ok(split)) => {
                proptest::prop_assert_eq!(&plain, &split);
                plain
            }
            (_, Ok(split)) => split,
            (_, Err(_)) => return Ok(()),
        };
        proptest::prop_assert_eq!(layout.coords.len(), n as usize);
        let mut seen = std::collections::HashSet::new();
        for c in &layout.coords {
            for (a, &len) in physical.iter().enumerate() {
                proptest::prop_assert!(c[a] < len, "{:?} outside {:?}", c, physical);
            }
            proptest::prop_assert!(seen.insert(*c), "{:?} placed twice", c);
        }
        if !layout.split {
            for (k, axes) in layout.axes.iter().enumerate() {
                let size: u32 = axes.iter().map(|&a| physical[a]).product();
                proptest::prop_assert_eq!(size, mesh[k], "axis {} on {:?}", k, axes);
            }
        }
    }
}
