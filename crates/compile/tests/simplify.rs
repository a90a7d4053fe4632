//! The algebraic simplifier: degenerate reductions become reshapes, others
//! stay (verifier after the pass).

mod common;
use common::{checked, parse};

use tpusim_compile::{simplify_degenerate_reductions, Changed};
use tpusim_hlo::Opcode;

fn keepdims_sum(init: &str, reducer: &str, dims: &str) -> String {
    format!(
        r#"
HloModule r
red {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] {reducer}(a, b)
}}
ENTRY main {{
  x = f32[8,1,4] parameter(0)
  z = f32[] constant({init})
  ROOT r = f32[8,4] reduce(x, z), dimensions={dims}, to_apply=red
}}
"#
    )
}

#[test]
fn a_sum_over_a_size_one_dimension_is_a_reshape() {
    for (init, reducer) in [
        ("0", "add"),
        ("1", "multiply"),
        ("-inf", "maximum"),
        ("inf", "minimum"),
    ] {
        let mut m = parse(&keepdims_sum(init, reducer, "{1}"));
        let changed = checked(&mut m, simplify_degenerate_reductions);
        assert!(matches!(changed, Changed::Yes(_)), "{reducer}");
        let root = m.instr(m.entry().root);
        assert_eq!(root.opcode, Opcode::Reshape, "{reducer}");
        assert_eq!(m.instr(root.operands[0]).opcode, Opcode::Parameter);
    }
}

#[test]
fn other_reductions_stay() {
    // Not the reducer's identity: reduce(x, 1) over one element adds 1.
    let mut m = parse(&keepdims_sum("1", "add", "{1}"));
    assert_eq!(checked(&mut m, simplify_degenerate_reductions), Changed::No);
    assert_eq!(m.instr(m.entry().root).opcode, Opcode::Reduce);
    // A dimension of size 4 is a real sum.
    let text = keepdims_sum("0", "add", "{1}")
        .replace("f32[8,4] reduce", "f32[8,1] reduce")
        .replace("dimensions={1}", "dimensions={2}");
    let mut m = parse(&text);
    assert_eq!(checked(&mut m, simplify_degenerate_reductions), Changed::No);
}
