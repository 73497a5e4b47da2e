//! Fuzzing the input files: the topology TOML parser, `Topology::parse_spec` and the
//! tuning-table parser get arbitrary text and structured-but-wrong documents (huge, zero
//! and negative numbers, odd link entries, malformed fields). Each must answer a topology
//! or table, or a typed error; a panic fails the test. `PROPTEST_CASES` sets the number of
//! cases per harness (256 by default); `scripts/fuzz.sh` runs more and prints the counts.

use oxccl_framework::limits::MAX_RANKS;
use oxccl_framework::tune::TuneTable;
use oxccl_framework::Topology;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Run `check` on the configured number of cases of `strategy`, print how many ran and
/// how many were accepted, and fail on the first case that fails (a panic included).
fn fuzz<S: Strategy>(name: &str, strategy: S, check: impl Fn(S::Value) -> bool)
where
    S::Value: std::fmt::Debug,
{
    let (accepted, refused) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let outcome = TestRunner::new(runner_config()).run(&strategy, |value| {
        let counter = if check(value) { &accepted } else { &refused };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(())
    });
    let (accepted, refused) = (accepted.into_inner(), refused.into_inner());
    eprintln!(
        "fuzz {name}: {} cases ({accepted} accepted, {refused} refused)",
        accepted + refused
    );
    outcome.unwrap();
}

/// Integers at and around the bounds, as TOML writes them, and a few non-integers.
fn toml_int() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => prop::sample::select(vec![
            "0",
            "1",
            "2",
            "8",
            "1023",
            "1024",
            "1025",
            "-1",
            "-8",
            "9223372036854775807",
            "-9223372036854775808",
            "18446744073709551615",
            "99999999999",
            "1.5",
            "\"8\"",
        ])
        .prop_map(String::from),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        4 => (0i64..20).prop_map(|n| n.to_string()),
    ]
}

fn toml_float() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "nan", "inf", "-inf", "-1.0", "0.0", "1e308", "56.0", "3"
        ])
        .prop_map(String::from),
        any::<f64>().prop_map(|f| format!("{f:?}")),
    ]
}

fn int_list(max_len: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(toml_int(), 0..max_len).prop_map(|v| format!("[{}]", v.join(", ")))
}

fn fabric_table(name: &'static str) -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["mesh", "ring", "plane", "none", "star", ""]),
        prop::sample::select(vec!["sdma", "rdma", "nvlink"]),
        toml_float(),
        toml_float(),
        prop::option::of(any::<bool>()),
        prop::option::of(toml_float()),
    )
        .prop_map(move |(wiring, kind, bw, lat, shared, nic)| {
            let mut table = format!(
                "[{name}]\nwiring = \"{wiring}\"\nkind = \"{kind}\"\n\
                 bandwidth_gbps = {bw}\nlatency_us = {lat}\n"
            );
            if let Some(shared) = shared {
                table.push_str(&format!("shared_nic = {shared}\n"));
            }
            if let Some(nic) = nic {
                table.push_str(&format!("nic_gbps = {nic}\n"));
            }
            table
        })
}

/// `[[link]]` entries: rank lists of any length, one-way links, and both forms at once.
fn link_entry() -> impl Strategy<Value = String> {
    prop_oneof![
        (int_list(5), prop::option::of(toml_float())).prop_map(|(ranks, bw)| format!(
            "[[link]]\nranks = {ranks}\n{}",
            bw.map_or(String::new(), |b| format!("bandwidth_gbps = {b}\n"))
        )),
        (toml_int(), toml_int(), toml_float()).prop_map(|(from, to, lat)| format!(
            "[[link]]\nfrom = {from}\nto = {to}\nlatency_us = {lat}\n"
        )),
        (int_list(3), toml_int())
            .prop_map(|(ranks, from)| format!("[[link]]\nranks = {ranks}\nfrom = {from}\n")),
    ]
}

fn broken_list() -> impl Strategy<Value = String> {
    prop::collection::vec((toml_int(), toml_int()), 0..3).prop_map(|pairs| {
        let pairs: Vec<String> = pairs.iter().map(|(a, b)| format!("\"{a}-{b}\"")).collect();
        format!("broken = [{}]\n", pairs.join(", "))
    })
}

/// A topology document made of valid pieces with wrong values, sometimes cut short.
fn topology_toml() -> impl Strategy<Value = String> {
    (
        int_list(4),
        broken_list(),
        prop::option::weighted(0.3, fabric_table("intra")),
        prop::option::weighted(0.3, fabric_table("inter")),
        prop::collection::vec(link_entry(), 0..3),
        any::<prop::sample::Index>(),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(servers, broken, intra, inter, links, cut, truncate)| {
            let mut doc = format!("servers = {servers}\n{broken}");
            doc.extend(intra);
            doc.extend(inter);
            doc.extend(links);
            if truncate {
                // Every piece is ASCII, so any byte index is a character boundary.
                doc.truncate(cut.index(doc.len() + 1));
            }
            doc
        })
}

/// What every topology that parses must hold.
fn sound(t: &Topology) -> bool {
    let n = t.ranks();
    assert!((1..=MAX_RANKS).contains(&n), "{n} ranks");
    true
}

#[test]
fn fuzz_topology_toml_parses_or_refuses() {
    fuzz("topology_toml", topology_toml(), |doc| {
        Topology::from_toml(&doc).is_ok_and(|t| sound(&t))
    });
}

#[test]
fn fuzz_topology_arbitrary_text_parses_or_refuses() {
    fuzz("topology_text", "(?s).{0,200}", |text| {
        Topology::from_toml(&text).is_ok_and(|t| sound(&t))
    });
}

#[test]
fn fuzz_topology_specs_parse_or_refuse() {
    let spec = prop_oneof![
        (toml_int(), toml_int()).prop_map(|(m, n)| format!("{m}x{n}")),
        (any::<u64>(), any::<u64>()).prop_map(|(m, n)| format!("{m}X{n}")),
        prop::sample::select(vec![
            "mesh8",
            "mesh8-cut",
            "ring8",
            "2x8",
            "1xN",
            "x8",
            "8x"
        ])
        .prop_map(String::from),
        "[a-z0-9x.-]{0,16}",
    ];
    fuzz("topology_spec", spec, |spec| {
        Topology::parse_spec(&spec).is_ok_and(|t| sound(&t))
    });
}

const OPERATORS: &[&str] = &[
    "all_reduce",
    "AllGather",
    "all-to-all-v",
    "barrier",
    "allsum",
    "-",
];
const DTYPES: &[&str] = &["float", "f32", "bfloat16", "int8", "quad", "1"];
const TIMES: &[&str] = &[
    "3.5", "0", "-1", "NaN", "inf", "1e308", "1e-320", "x", "0.01",
];
const EXECUTORS: &[&str] = &["ring", "mesh", "one-shot", "#"];
const TOPOLOGIES: &[&str] = &[
    "[8]",
    "[8,8]",
    "[8] broken 0-1",
    "[8] broken 1-0",
    "[4]",
    "[0]",
    "[",
    "]",
    "",
    "[8] broken",
    "[8] broken 0-1,0-1",
    "[99999999999999999999]",
    "[8]  broken 0-1",
    "[1024,1]",
    "[18446744073709551615,1]",
];

/// One measurement line from real and wrong fields.
fn tune_line() -> impl Strategy<Value = String> {
    let time = prop_oneof![
        prop::sample::select(TIMES).prop_map(String::from),
        any::<f64>().prop_map(|f| f.to_string()),
    ];
    (
        prop::sample::select(OPERATORS),
        toml_int(),
        prop::sample::select(DTYPES),
        toml_int(),
        prop::sample::select(EXECUTORS),
        time,
        prop::sample::select(TOPOLOGIES),
    )
        .prop_map(|(op, ranks, dtype, bytes, exec, time, topo)| {
            format!("{op} {ranks} {dtype} {bytes} {exec} {time} {topo}")
        })
}

fn tune_table() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        8 => tune_line(),
        1 => "[ -~]{0,40}",
        1 => Just("# a comment".to_string()),
    ];
    (
        prop::sample::select(vec!["oxccl-tune 1", "oxccl-tune 2", "oxccl-tune", ""]),
        prop::collection::vec(line, 0..12),
    )
        .prop_map(|(header, lines)| format!("{header}\n{}\n", lines.join("\n")))
}

#[test]
fn fuzz_tune_table_lines_parse_or_refuse() {
    fuzz("tune_table", tune_table(), |text| {
        match TuneTable::parse(&text) {
            Ok(table) => {
                let again = TuneTable::parse(&table.to_text()).expect("a parsed table reads back");
                assert_eq!(again, table);
                true
            }
            Err(e) => {
                assert!(e.line.is_some() || e.reason.contains("oxccl-tune 1"), "{e}");
                false
            }
        }
    });
}

#[test]
fn fuzz_tune_table_arbitrary_text_parses_or_refuses() {
    fuzz("tune_text", "(?s).{0,300}", |text| {
        TuneTable::parse(&format!("oxccl-tune 1\n{text}")).is_ok()
    });
}

/// Proptest's defaults (`PROPTEST_CASES` honoured), without a failure file: a failing case
/// is printed in full, shrunk, in the test's output.
fn runner_config() -> Config {
    Config {
        failure_persistence: None,
        ..Config::default()
    }
}
