//! The fusion pass: what it groups, and that every rewritten module verifies
//! and prints to text that parses back to the same module.

use std::path::Path;
use tpusim_hlo::passes::fuse;
use tpusim_hlo::{parse_module, parse_modules, print_module, verifier::verify, Module, Opcode};

fn fused(text: &str) -> Module {
    let mut m = parse_module(text).unwrap();
    fuse(&mut m);
    m
}

fn fusions(m: &Module) -> Vec<(String, Vec<Opcode>)> {
    let e = m.entry();
    e.instrs
        .iter()
        .map(|&i| m.instr(i))
        .filter(|i| i.opcode == Opcode::Fusion)
        .map(|f| {
            let kind = f.attr_ident("kind").unwrap().to_string();
            let body = m.comp(f.attr_comp("calls").unwrap());
            let ops = body
                .instrs
                .iter()
                .map(|&i| m.instr(i).opcode)
                .filter(|o| *o != Opcode::Parameter)
                .collect();
            (kind, ops)
        })
        .collect()
}

fn round_trips(m: &Module) {
    verify(m).unwrap_or_else(|e| panic!("{}", e[0].message));
    let text = print_module(m);
    let back = parse_modules(&text).unwrap_or_else(|e| panic!("{}", e.render("<fused>", &text)));
    assert_eq!(print_module(&back[0]), text);
}

#[test]
fn bias_and_relu_fuse_into_the_matmul() {
    let m = fused(
        "HloModule m\nENTRY e {\n  x = f32[8,16] parameter(0)\n  w = f32[16,32] parameter(1)\n  b = f32[32] parameter(2)\n  d = f32[8,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  bb = f32[8,32] broadcast(b), dimensions={1}\n  a = f32[8,32] add(d, bb)\n  z = f32[] constant(0)\n  zb = f32[8,32] broadcast(z), dimensions={}\n  ROOT r = f32[8,32] maximum(a, zb)\n}\n",
    );
    let f = fusions(&m);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].0, "kOutput");
    for op in [
        Opcode::Dot,
        Opcode::Add,
        Opcode::Maximum,
        Opcode::Broadcast,
        Opcode::Constant,
    ] {
        assert!(f[0].1.contains(&op), "{op:?} not fused: {f:?}");
    }
    assert_eq!(m.entry().instrs.len(), 4, "three parameters and the fusion");
    round_trips(&m);
}

#[test]
fn elementwise_producers_fuse_into_a_reduce() {
    let m = fused(
        "HloModule m\nsum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\nENTRY e {\n  x = f32[8,16] parameter(0)\n  ex = f32[8,16] exponential(x)\n  z = f32[] constant(0)\n  ROOT r = f32[8] reduce(ex, z), dimensions={1}, to_apply=sum\n}\n",
    );
    let f = fusions(&m);
    assert_eq!(
        f,
        vec![(
            "kInput".to_string(),
            vec![Opcode::Exp, Opcode::Constant, Opcode::Reduce]
        )]
    );
    // The reducer is applied element-wise, not a program: it is left alone.
    assert_eq!(m.comp(m.find_comp("sum").unwrap()).instrs.len(), 3);
    round_trips(&m);
}

#[test]
fn a_cheap_value_with_users_outside_is_copied_into_the_fusion() {
    let m = fused(
        "HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n  n = f32[4] negate(x)\n  a = f32[4] abs(n)\n  ROOT t = (f32[4], f32[4]) tuple(n, a)\n}\n",
    );
    assert_eq!(
        fusions(&m),
        vec![("kLoop".to_string(), vec![Opcode::Negate, Opcode::Abs])],
        "abs's fusion computes negate again"
    );
    let caller: Vec<Opcode> = m
        .entry()
        .instrs
        .iter()
        .map(|&i| m.instr(i).opcode)
        .collect();
    assert!(
        caller.contains(&Opcode::Negate),
        "the tuple still reads negate: {caller:?}"
    );
    round_trips(&m);
}

#[test]
fn an_expensive_value_with_users_outside_stays_unfused() {
    let m = fused(
        "HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n  n = f32[4] log(x)\n  a = f32[4] abs(n)\n  ROOT t = (f32[4], f32[4]) tuple(n, a)\n}\n",
    );
    assert!(
        fusions(&m).is_empty(),
        "log has a user outside any fusion of abs"
    );
    round_trips(&m);
}

#[test]
fn slices_and_transposes_fuse_into_their_consumer() {
    let m = fused(
        "HloModule m\nENTRY e {\n  x = f32[8,16] parameter(0)\n  t = f32[16,8] transpose(x), dimensions={1,0}\n  s = f32[4,8] slice(t), slice={[0:4], [0:8]}\n  ROOT n = f32[4,8] negate(s)\n}\n",
    );
    assert_eq!(
        fusions(&m),
        vec![(
            "kLoop".to_string(),
            vec![Opcode::Transpose, Opcode::Slice, Opcode::Negate]
        )]
    );
    round_trips(&m);
}

/// Random DAGs of cheap and expensive elementwise ops with many shared
/// values: whatever is copied or moved, the result verifies (every operand
/// is in its user's computation) and round-trips.
mod random_dags {
    use super::*;
    use proptest::prelude::*;

    const OPS: [&str; 6] = ["negate", "abs", "exponential", "add", "multiply", "divide"];

    fn module(choices: &[(usize, usize, usize)]) -> String {
        let mut text = String::from("HloModule m\nENTRY e {\n  v0 = f32[4] parameter(0)\n");
        for (k, &(op, a, b)) in choices.iter().enumerate() {
            let k = k + 1;
            let (a, b) = (a % k, b % k);
            let op = OPS[op % OPS.len()];
            let operands = if op == "negate" || op == "abs" || op == "exponential" {
                format!("v{a}")
            } else {
                format!("v{a}, v{b}")
            };
            text += &format!("  v{k} = f32[4] {op}({operands})\n");
        }
        let n = choices.len();
        let outs: Vec<String> = (n / 2..=n).map(|k| format!("v{k}")).collect();
        let shapes = vec!["f32[4]"; outs.len()].join(", ");
        text += &format!("  ROOT t = ({shapes}) tuple({})\n}}\n", outs.join(", "));
        text
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
        #[test]
        fn fusing_any_dag_verifies(choices in proptest::collection::vec((0usize..6, 0usize..64, 0usize..64), 2..24)) {
            let m = fused(&module(&choices));
            round_trips(&m);
        }
    }
}

#[test]
fn real_unoptimized_modules_fuse_verify_and_round_trip() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/corpus");
    let mut total = 0;
    let mut files = Vec::new();
    for entry in std::fs::read_dir(corpus.join("jax_generated")).unwrap() {
        let p = entry.unwrap().path();
        if p.to_string_lossy().ends_with(".lowered.hlo") {
            files.push(p);
        }
    }
    for entry in std::fs::read_dir(corpus.join("jax_cases")).unwrap() {
        files.push(entry.unwrap().path().join("pre.hlo"));
    }
    for p in files {
        let mut m = parse_module(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let stats = fuse(&mut m);
        total += stats.fusions;
        verify(&m).unwrap_or_else(|e| panic!("{}: {}", p.display(), e[0].message));
        round_trips(&m);
    }
    assert!(
        total >= 50,
        "only {total} fusions over the unoptimized corpus"
    );
}

/// The scalar f32 sum the reductions below apply.
const ADD: &str = r#"add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"#;

const SOFTMAX: &str = r#"
HloModule softmax

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[64,512] parameter(0)
  e = f32[64,512] tanh(x)
  zero = f32[] constant(0)
  sum = f32[64] reduce(e, zero), dimensions={1}, to_apply=add
  b = f32[64,512] broadcast(sum), dimensions={0}
  ROOT p = f32[64,512] divide(e, b)
}
"#;

/// An expensive producer of a reduction's input (tanh: not copied into its
/// second consumer) is fused with the reduction as a second output, so the
/// reduction does not read it back.
#[test]
fn a_reduction_outputs_the_producer_others_read_too() {
    let m = fused(SOFTMAX);
    round_trips(&m);
    let f = fusions(&m);
    assert_eq!(f.len(), 2, "{}", print_module(&m));
    assert_eq!(f[0].0, "kInput");
    assert!(f[0].1.contains(&Opcode::Tanh) && f[0].1.contains(&Opcode::Reduce));
    let mof = m
        .entry()
        .instrs
        .iter()
        .map(|&i| m.instr(i))
        .find(|i| i.opcode == Opcode::Fusion && i.shape.is_tuple())
        .expect("a multi-output fusion");
    assert_eq!(mof.shape.tuple_elements().unwrap().len(), 2);
    // The divide's fusion reads the tanh through the second output.
    assert!(!f[1].1.contains(&Opcode::Tanh), "{}", print_module(&m));
}

/// A softmax over bf16 scores as JAX writes it (f32 inside): the f32 exp is
/// one hardware instruction, so each consumer computes it again from the
/// bf16 scores and the row maxima (fewer bytes than the f32 exp) instead of
/// the sum writing it out and the divide reading it back.
#[test]
fn an_f32_softmax_recomputes_exp_from_the_bf16_scores() {
    let m = fused(&format!(
        "HloModule softmax\n\n{ADD}{}",
        r#"

ENTRY main {
  s = bf16[64,512] parameter(0)
  mx = f32[64] parameter(1)
  x = f32[64,512] convert(s)
  bm = f32[64,512] broadcast(mx), dimensions={0}
  d = f32[64,512] subtract(x, bm)
  e = f32[64,512] exponential(d)
  zero = f32[] constant(0)
  sum = f32[64] reduce(e, zero), dimensions={1}, to_apply=add
  b = f32[64,512] broadcast(sum), dimensions={0}
  p = f32[64,512] divide(e, b)
  ROOT c = bf16[64,512] convert(p)
}
"#
    ));
    round_trips(&m);
    let f = fusions(&m);
    assert_eq!(f.len(), 2, "{}", print_module(&m));
    assert!(
        f.iter().all(|(_, ops)| ops.contains(&Opcode::Exp)),
        "both fusions compute exp: {f:?}"
    );
    assert!(
        m.entry()
            .instrs
            .iter()
            .all(|&i| !(m.instr(i).opcode == Opcode::Fusion && m.instr(i).shape.is_tuple())),
        "no fusion writes the f32 exp out: {}",
        print_module(&m)
    );
}

/// When another reader of the producer comes before the reduction, fusing
/// them would make that reader wait for the reduction: no second output.
#[test]
fn no_second_output_for_a_producer_read_before_the_reduction() {
    let text = SOFTMAX
        .replace(
            "  zero = f32[] constant(0)\n",
            "  early = f32[64,512] divide(e, x)\n  zero = f32[] constant(0)\n",
        )
        .replace(
            "ROOT p = f32[64,512] divide(e, b)",
            "p = f32[64,512] divide(e, b)\n  ROOT t = (f32[64,512], f32[64,512]) tuple(p, early)",
        );
    let m = fused(&text);
    round_trips(&m);
    assert!(m
        .entry()
        .instrs
        .iter()
        .all(|&i| !(m.instr(i).opcode == Opcode::Fusion && m.instr(i).shape.is_tuple())));
}

/// A dot whose result a reduction sums and a later op also reads: one output
/// fusion computes the dot, reduces it and writes it (two outputs), instead
/// of the dot writing its result for the reduction to read back.
#[test]
fn a_reduction_of_a_dot_others_read_is_the_dot_fusions_second_output() {
    let m = fused(&format!(
        "HloModule dotsum\n\n{ADD}{}",
        r#"

ENTRY main {
  x = bf16[64,128] parameter(0)
  w = bf16[128,256] parameter(1)
  d = bf16[64,256] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  wide = f32[64,256] convert(d)
  zero = f32[] constant(0)
  sum = f32[64] reduce(wide, zero), dimensions={1}, to_apply=add
  n = bf16[64,256] negate(d)
  ROOT t = (f32[64], bf16[64,256]) tuple(sum, n)
}
"#
    ));
    round_trips(&m);
    let f = fusions(&m);
    let with_dot: Vec<_> = f
        .iter()
        .filter(|(_, ops)| ops.contains(&Opcode::Dot))
        .collect();
    assert_eq!(with_dot.len(), 1, "{}", print_module(&m));
    assert!(with_dot[0].1.contains(&Opcode::Reduce), "{f:?}");
    assert!(
        m.entry()
            .instrs
            .iter()
            .any(|&i| m.instr(i).opcode == Opcode::Fusion && m.instr(i).shape.is_tuple()),
        "the dot's fusion also outputs the dot: {}",
        print_module(&m)
    );
}
