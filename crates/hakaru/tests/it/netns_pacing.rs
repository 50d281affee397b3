//! TCP pacing (`tcp -b`) over a real, unshaped veth pair: every flow runs at the asked rate,
//! as the receiver counts it, in both directions.

use std::time::Duration;

use super::common::num;
use super::netns_link::{Link, Shaping};

/// Asked rate per flow, bits per second, and as the flag spells it.
const RATE: f64 = 50e6;
const RATE_FLAG: &str = "50M";
/// Allowed relative error of each flow's receiver rate.
const TOLERANCE: f64 = 0.02;

#[test]
fn paced_tcp_flows_run_at_the_asked_rate() {
    let Some(link) = Link::setup(&[], Shaping::NONE) else {
        return;
    };
    let server = link.start_server();
    let port = server.port_s();
    for reverse in [false, true] {
        let mut args = vec![
            "tcp",
            &link.server_ip,
            "-p",
            &port,
            "-P",
            "4",
            "-b",
            RATE_FLAG,
            "-t",
            "4",
            "-O",
            "1",
            "--json",
        ];
        if reverse {
            args.push("-R");
        }
        let doc = link.client_json(&args, Duration::from_secs(60));
        let flows = doc["flows"].as_array().expect("flows");
        assert_eq!(flows.len(), 4);
        let rates: Vec<f64> = flows
            .iter()
            .map(|f| num(f, "/receiver/bits_per_second"))
            .collect();
        eprintln!("paced -b {RATE_FLAG} reverse={reverse}: per flow {rates:?}");
        for r in &rates {
            assert!(
                (r / RATE - 1.0).abs() <= TOLERANCE,
                "a flow ran at {r:.0} bit/s, asked {RATE:.0} (reverse={reverse}): {rates:?}"
            );
        }
        // The sending end says how it paced.
        let sender = if reverse { "server_end" } else { "client" };
        let mode = doc[sender]["send_mode"].as_str().unwrap_or_default();
        assert!(mode.contains("paced to 50.0 Mbit/s per flow"), "{mode}");
        assert!(mode.contains("SO_MAX_PACING_RATE"), "{mode}");
    }
}
