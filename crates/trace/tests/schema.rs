//! The prost messages generated from proto/xplane.proto (src/xplane_pb.rs,
//! by crates/xla-proto/gen) carry exactly its field numbers: a generated file
//! edited by hand, or a stale one, fails here.

fn camel(snake: &str) -> String {
    snake
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

#[test]
fn every_proto_field_has_its_tag_in_the_rust_messages() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let proto = std::fs::read_to_string(format!("{dir}/proto/xplane.proto")).unwrap();
    let rust = std::fs::read_to_string(format!("{dir}/src/xplane_pb.rs")).unwrap();
    let lines: Vec<&str> = rust.lines().map(str::trim).collect();
    let mut fields = 0;
    for l in proto.lines().map(str::trim) {
        let Some((lhs, rhs)) = l.split_once(" = ") else {
            continue;
        };
        if l.starts_with("//") || l.starts_with("syntax") || l.starts_with("reserved") {
            continue;
        }
        let name = lhs.split_whitespace().last().unwrap();
        let tag = rhs.trim_end_matches(';');
        let attr = format!("tag = \"{tag}\")]");
        let found = lines.windows(2).any(|w| {
            w[0].ends_with(&attr)
                && (w[1].starts_with(&format!("pub {name}:"))
                    || w[1].starts_with(&format!("{}(", camel(name))))
        });
        assert!(found, "{name} = {tag} not in src/xplane_pb.rs");
        fields += 1;
    }
    // XSpace, XPlane, XLine, XEvent, XStat, XEventMetadata, XStatMetadata,
    // CoreDetails, MemoryAccessBreakdown, MemoryAccessed.
    assert_eq!(fields, 4 + 6 + 7 + 5 + 8 + 6 + 3 + 7 + 1 + 3);
}
