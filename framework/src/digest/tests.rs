use super::*;
use crate::op::OpKind;
use crate::tune::TuneEntry;
use oxccl_platform::{DataType, LinkAccess};

fn entry(name: &'static str, preference: i32) -> &'static ExecutorEntry {
    fn make() -> Box<dyn crate::executor::Executor> {
        unreachable!("never built: the digest reads entries only")
    }
    Box::leak(Box::new(ExecutorEntry {
        name,
        op: OpKind::AllReduce,
        description: "",
        crate_name: "test",
        constraints: Constraints::ANY,
        preference,
        make: crate::executor::Make::Static(make),
        file: None,
    }))
}

fn selector(name: &'static str, priority: i32) -> &'static SelectorEntry {
    fn never(_: &crate::select::SelectRequest<'_>) -> Option<&'static str> {
        None
    }
    Box::leak(Box::new(SelectorEntry {
        name,
        priority,
        select: never,
    }))
}

struct Owned {
    executors: Vec<&'static ExecutorEntry>,
    selectors: Vec<&'static SelectorEntry>,
    tune: Option<TuneTable>,
    topology: Topology,
    ccl_bytes: usize,
    link_channels: usize,
    mode: Mode,
    algo: AlgoOverride,
}

impl Owned {
    fn base() -> Owned {
        Owned {
            executors: vec![entry("ring", 10), entry("mesh", 20)],
            selectors: vec![selector("vendor", 5)],
            tune: Some(TuneTable {
                entries: vec![TuneEntry {
                    op: OpKind::AllReduce,
                    ranks: 8,
                    topology: "[8]".into(),
                    dtype: DataType::F32,
                    bytes: 1024,
                    executor: "ring".into(),
                    time_us: 3.5,
                }],
            }),
            topology: Topology::servers(vec![8, 8]).unwrap(),
            ccl_bytes: 1 << 20,
            link_channels: 2,
            mode: Mode::Direct,
            algo: AlgoOverride::default(),
        }
    }

    fn digest(&self) -> u64 {
        selection_digest(&SelectionInputs {
            executors: &self.executors,
            selectors: &self.selectors,
            tune: self.tune.as_ref(),
            topology: &self.topology,
            config: PlanningConfig {
                ccl_bytes: self.ccl_bytes,
                link_channels: self.link_channels,
                mode: self.mode,
                algo: &self.algo,
            },
        })
    }
}

#[test]
fn equal_inputs_agree_whatever_the_registration_order() {
    let a = Owned::base();
    let mut b = Owned::base();
    b.executors.reverse();
    assert_eq!(a.digest(), b.digest());
    assert_eq!(a.digest(), Owned::base().digest());
}

#[test]
fn fnv1a_matches_its_reference_values() {
    // Published FNV-1a 64 test vectors: "" and "a".
    assert_eq!(Digest::new().finish(), 0xcbf2_9ce4_8422_2325);
    assert_eq!(Digest::new().bytes(b"a").finish(), 0xaf63_dc4c_8601_ec8c);
}

#[test]
fn every_input_changes_the_digest() {
    let base = Owned::base().digest();
    let mut cases: Vec<(&str, Owned)> = Vec::new();
    let mut push = |what, f: &dyn Fn(&mut Owned)| {
        let mut o = Owned::base();
        f(&mut o);
        cases.push((what, o));
    };
    push("executor preference", &|o| {
        o.executors[0] = entry("ring", 11)
    });
    push("executor set", &|o| o.executors.push(entry("rhd", 1)));
    push("executor constraints", &|o| {
        let e = entry("mesh", 20);
        let changed = Box::leak(Box::new(ExecutorEntry {
            constraints: Constraints {
                full_mesh: true,
                ..Constraints::ANY
            },
            ..ExecutorEntry { ..*e }
        }));
        o.executors[1] = changed;
    });
    push("executor crate", &|o| {
        let e = entry("mesh", 20);
        o.executors[1] = Box::leak(Box::new(ExecutorEntry {
            crate_name: "vendor",
            ..ExecutorEntry { ..*e }
        }));
    });
    push("imported file content", &|o| {
        let e = entry("mesh", 20);
        let file = |content| {
            &*Box::leak(Box::new(crate::executor::AlgoFile {
                path: "a.xml".into(),
                name: "mesh".into(),
                content,
            }))
        };
        o.executors[1] = Box::leak(Box::new(ExecutorEntry {
            file: Some(file(7)),
            ..ExecutorEntry { ..*e }
        }));
    });
    push("count unit", &|o| {
        let e = entry("mesh", 20);
        o.executors[1] = Box::leak(Box::new(ExecutorEntry {
            constraints: Constraints {
                count_unit: 4,
                ..Constraints::ANY
            },
            ..ExecutorEntry { ..*e }
        }));
    });
    push("fixed links", &|o| {
        let e = entry("mesh", 20);
        o.executors[1] = Box::leak(Box::new(ExecutorEntry {
            constraints: Constraints {
                fixed_links: &[(0, 1)],
                ..Constraints::ANY
            },
            ..ExecutorEntry { ..*e }
        }));
    });
    push("selector", &|o| o.selectors[0] = selector("vendor", 6));
    push("no tuning table", &|o| o.tune = None);
    push("tuning time", &|o| {
        o.tune.as_mut().unwrap().entries[0].time_us = 3.25;
    });
    push("servers", &|o| {
        o.topology = Topology::servers(vec![4, 4, 4, 4]).unwrap()
    });
    push("broken link", &|o| {
        o.topology = o.topology.clone().with_broken(0, 9).unwrap()
    });
    push("link access", &|o| {
        o.topology = o
            .topology
            .clone()
            .with_fabric_access(LinkAccess::LoadStore, LinkAccess::LoadStore)
    });
    push("link figures", &|o| {
        let slow = LinkSpec {
            bandwidth_gbps: 1.0,
            ..o.topology.link(0, 1).unwrap()
        };
        o.topology = o.topology.clone().with_link(0, 1, slow).unwrap();
    });
    push("ccl bytes", &|o| o.ccl_bytes *= 2);
    push("link channels", &|o| o.link_channels = 4);
    push("mode", &|o| o.mode = Mode::Staged);
    push("algo override", &|o| {
        o.algo.set(Some(OpKind::AllReduce), "ring")
    });
    for (what, o) in cases {
        assert_ne!(o.digest(), base, "{what} left the digest unchanged");
    }
}

#[test]
fn an_imported_file_is_digested_by_its_content_not_its_path() {
    let with = |path: &str, content: u64| {
        let mut o = Owned::base();
        let e = entry("mesh", 20);
        let file = Box::leak(Box::new(crate::executor::AlgoFile {
            path: path.into(),
            name: "mesh".into(),
            content,
        }));
        o.executors[1] = Box::leak(Box::new(ExecutorEntry {
            file: Some(file),
            ..ExecutorEntry { ..*e }
        }));
        o.digest()
    };
    assert_eq!(with("/host-a/algos/x.xml", 7), with("/host-b/y.xml", 7));
    assert_ne!(
        with("/host-a/algos/x.xml", 7),
        with("/host-a/algos/x.xml", 8)
    );
}
