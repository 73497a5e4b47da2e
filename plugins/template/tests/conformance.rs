//! The executor over the analyzer's conformance matrix: every shape its constraints
//! allow, every type and count, in place and not, zero-copy and staged.

use oxccl::framework::analyzer::conformance::{check_conformance, shapes};
use oxccl::OpKind;
use oxccl_plugin_template::NAME;

#[test]
fn one_stream_mesh_passes_the_conformance_matrix() {
    let outcome = check_conformance(OpKind::AllGather, NAME).unwrap_or_else(|e| panic!("{e}"));
    // It declares a full mesh of load/store links: the shapes with put-only or broken
    // links are skipped, the others checked (what a broken link does to selection and
    // forcing: tests/broken_link.rs).
    let all = shapes();
    let skipped = all
        .iter()
        .filter(|t| t.put_only_link(false).is_some() || !t.is_full_mesh())
        .count();
    assert!(
        outcome.skipped_shapes == skipped && skipped < all.len(),
        "{outcome:?}"
    );
    assert!(outcome.cases > 0, "{outcome:?}");
}
