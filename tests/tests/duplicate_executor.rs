//! Registering an executor name twice is an error naming both crates. (Own binary: the
//! duplicate poisons this binary's registry.)

use oxccl::{
    registry, Communicator, Config, Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind,
    Peers, PlanCtx, ResourceRequest,
};

struct NotARing;

impl Executor for NotARing {
    fn resources(&self, _: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(ResourceRequest::with_peers(Peers::All))
    }

    fn kernel_run(&self, _: &mut KernelCtx<'_>, _: &KernelArgs) -> Result<(), Error> {
        Ok(())
    }
}

oxccl::register_executor! {
    name: "ring",
    op: OpKind::AllReduce,
    description: "a second executor named ring",
    constraints: Constraints::ANY,
    preference: 0,
    make: || Box::new(NotARing),
}

#[test]
fn duplicate_names_are_reported_with_both_crates() {
    let err = registry().unwrap_err().to_string();
    assert!(
        err.contains("`ring`") && err.contains("oxccl-algorithms") && err.contains("oxccl-tests"),
        "{err}"
    );
    let err = Communicator::init_all(2, Config::default())
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, Error::Registry(_)), "{err:?}");
}
