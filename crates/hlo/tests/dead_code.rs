//! Dead-code removal: what is dead, and which collectives count as effects.

use tpusim_hlo::passes::{remove_dead_code, remove_dead_code_and_collectives};
use tpusim_hlo::{parse_module, Module, Opcode};

const TEXT: &str = r#"HloModule dead, num_partitions=2
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  p = f32[4] parameter(0)
  unused = f32[4] negate(p)
  gathered = f32[8] all-gather(p), channel_id=1, replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true
  summed = f32[4] all-reduce(p), channel_id=2, replica_groups={{0,1}}, to_apply=add, use_global_device_ids=true
  ROOT r = f32[4] exponential(summed)
}
"#;

fn count(m: &Module, op: Opcode) -> usize {
    let entry = m.comp(m.entry);
    entry
        .instrs
        .iter()
        .filter(|&&i| m.instr(i).opcode == op)
        .count()
}

#[test]
fn plain_dce_keeps_collectives_and_drops_dead_arithmetic() {
    let mut m = parse_module(TEXT).unwrap();
    assert_eq!(remove_dead_code(&mut m), 1);
    assert_eq!(count(&m, Opcode::Negate), 0);
    assert_eq!(count(&m, Opcode::AllGather), 1);
}

#[test]
fn spmd_dce_also_drops_unused_collectives_but_not_used_ones() {
    let mut m = parse_module(TEXT).unwrap();
    assert_eq!(remove_dead_code_and_collectives(&mut m), 2);
    assert_eq!(count(&m, Opcode::AllGather), 0);
    assert_eq!(count(&m, Opcode::AllReduce), 1);
    tpusim_hlo::verify(&m).unwrap();
}
