//! The plugin proves itself with the analyzer, as any third-party executor would.

use oxccl::framework::analyzer::conformance::assert_conforms;
use oxccl::OpKind;
use oxccl_plugin_bidir_ring as _;

#[test]
fn bidir_ring_passes_the_conformance_matrix() {
    assert_conforms(OpKind::AllReduce, "bidir-ring");
}
