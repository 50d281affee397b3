//! `latency_probe` in plan steps: from every client, or from the first one alone.

use crate::check::check;
use crate::file::{expand, parse, ProbeFrom};

const PLAN: &str = r#"
[hosts.rx]
address = "10.0.0.1"
netns = "rx"
[hosts.a]
netns = "a"
[hosts.b]
netns = "b"

[[step]]
kind = "tcp"
receivers = ["rx"]
senders = ["a", "b"]
time = 5
latency_probe = "LP"
latency_probe_rate = 50
"#;

#[test]
fn first_puts_the_probes_on_one_client_and_all_on_every_client() {
    for (from, want) in [("first", [true, false]), ("all", [true, true])] {
        let plan = parse(&PLAN.replace("LP", from)).expect("plan");
        assert!(check(&plan).iter().all(|p| !p.fatal), "{:?}", check(&plan));
        let steps = expand(&plan);
        let s = &steps[0];
        assert!(matches!(
            s.probe,
            Some((ProbeFrom::First | ProbeFrom::All, _))
        ));
        for (sender, probes) in want.iter().enumerate() {
            let f = s.client_flags(sender, 0);
            let at = f.iter().position(|a| a == "--latency-probe");
            assert_eq!(at.is_some(), *probes, "{from}, sender {sender}: {f:?}");
            if let Some(i) = at {
                assert_eq!(f.get(i + 1).map(String::as_str), Some("50"));
            }
            assert!(
                f.iter().any(|a| a == "-t"),
                "the step's own flags stay: {f:?}"
            );
        }
    }
}

#[test]
fn probes_belong_to_bulk_steps_without_a_search() {
    let bad = [
        (
            PLAN.replace("LP", "first")
                .replace("\"tcp\"", "\"latency\""),
            "tcp, udp and pps",
        ),
        (
            PLAN.replace("LP", "all")
                .replace("kind = \"tcp\"", "kind = \"udp\"\nfind_max = { loss = 1 }")
                .replace("time = 5\n", ""),
            "exclude each other",
        ),
        (
            PLAN.replace("latency_probe = \"LP\"\n", ""),
            "latency_probe_rate needs latency_probe",
        ),
    ];
    for (text, needle) in bad {
        let plan = parse(&text).expect("plan");
        let problems = check(&plan);
        assert!(
            problems
                .iter()
                .any(|p| p.fatal && p.message.contains(needle)),
            "{needle}: {problems:?}"
        );
    }
    assert!(
        parse(&PLAN.replace("LP", "some")).is_err(),
        "an unknown choice"
    );
}
