//! Network-namespace tests of the UDP tests (`hakaru udp`, `hakaru pps`) against what the
//! kernel itself knows: a tbf-shaped link, an nftables rule dropping a known share of the
//! datagrams, and the veth's own packet counter.
//!
//! They run over the same [`Link`] as the TCP namespace test, one at a time. Needs root, `ip`,
//! and `tc` or `nft` where a test shapes or drops; without them a test prints why and passes
//! without running.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::common::{bin, count, num, stderr, ServerProc};
use super::netns_link::{Link, Shaping};

/// Longest a client run of a few seconds may take, setup and teardown included.
const CLIENT_LIMIT: Duration = Duration::from_secs(40);

/// Runs `hakaru <mode> <server> -p <port> <args> --json` in the client namespace.
fn run_client(link: &Link, server: &ServerProc, mode: &str, args: &[&str]) -> Value {
    let port = server.port_s();
    let mut all = vec![mode, &link.server_ip, "-p", &port];
    all.extend_from_slice(args);
    all.push("--json");
    link.client_json(&all, CLIENT_LIMIT)
}

/// The one direction's totals of a forward run.
fn forward_totals<'a>(doc: &'a Value, name: &str) -> &'a Value {
    let totals = doc["totals"].as_array().expect("totals is an array");
    assert_eq!(
        totals.len(),
        1,
        "{name}: one direction expected: {totals:?}"
    );
    assert_eq!(totals[0]["dir"], "up", "{name}: direction label");
    &totals[0]
}

/// `hakaru udp -b 50M` over a link shaped to 100 Mbit/s: a paced sender stays under the
/// shaping, so every datagram arrives and the receiver sees exactly the asked payload rate. A
/// sender that bursts or overshoots would overflow tbf (loss), and one that undershoots or
/// counts wrongly would miss the rate.
#[test]
fn udp_rate_on_shaped_link() {
    const TARGET_BPS: f64 = 50e6;
    const TOLERANCE: f64 = 0.01;
    let Some(link) = Link::setup(&[], Shaping::client("100mbit")) else {
        return;
    };
    let server = link.start_server();
    let doc = run_client(&link, &server, "udp", &["-b", "50M", "-t", "5"]);
    let t = forward_totals(&doc, "udp");
    let got = num(t, "/receiver/bits_per_second");
    let (sent, received) = (
        count(t, "/udp/sent_datagrams"),
        count(t, "/udp/received_datagrams"),
    );
    let lost = count(t, "/udp/lost");
    let length = count(&doc, "/spec/length");
    eprintln!(
        "netns udp shaped: receiver {:.3} Mbit/s payload ({:+.3} % of {:.0} Mbit/s) over {:.3} \
         s, {} B; sent {sent} datagrams of {length} B, received {received}, lost {lost} \
         ({} %), out of order {}, jitter {:?} ms, {:.1} pps, socket drops {}",
        got / 1e6,
        (got / TARGET_BPS - 1.0) * 100.0,
        TARGET_BPS / 1e6,
        num(t, "/receiver/seconds"),
        count(t, "/receiver/bytes"),
        t["udp"]["lost_percent"],
        t["udp"]["out_of_order"],
        t["udp"]["jitter_ms"].as_f64(),
        num(t, "/udp/received_pps"),
        t["udp"]["socket_drops"],
    );
    assert!(
        (got / TARGET_BPS - 1.0).abs() <= TOLERANCE,
        "receiver payload rate {:.3} Mbit/s is not within {} % of {:.0} Mbit/s",
        got / 1e6,
        TOLERANCE * 100.0,
        TARGET_BPS / 1e6
    );
    assert_eq!(lost, 0, "datagrams lost on a link with room to spare");
    assert_eq!(sent, received, "sent and received datagram counts differ");
    assert!(received > 0, "no datagrams received");
    assert_eq!(
        count(t, "/receiver/bytes"),
        received * length,
        "receiver bytes are not received datagrams x {length} B of payload"
    );
}

/// An nftables table in one namespace, deleted on drop however the test ends (the namespace
/// going would delete it too; this keeps the rule's lifetime explicit).
struct NftTable {
    ns: String,
    family: &'static str,
    name: &'static str,
}

impl Drop for NftTable {
    fn drop(&mut self) {
        // No run_cmd here: a panic inside drop while unwinding would abort the test binary.
        let r = Command::new("ip")
            .args(["netns", "exec", &self.ns, "nft", "delete", "table"])
            .args([self.family, self.name])
            .output();
        match r {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "netns: could not delete nft table {}: {}",
                self.name,
                stderr(&o).trim()
            ),
            Err(e) => eprintln!("netns: could not run nft: {e}"),
        }
    }
}

/// Packets an nftables chain's rule counter has matched (`counter packets N bytes M`).
fn nft_counter(link: &Link, table: &NftTable, chain: &str) -> u64 {
    let o = link.must_in_server(&["nft", "list", "chain", table.family, table.name, chain]);
    let text = String::from_utf8_lossy(&o.stdout);
    let mut words = text.split_whitespace();
    words
        .find(|w| *w == "packets")
        .and_then(|_| words.next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no rule counter in:\n{text}"))
}

/// An nftables rule in the server namespace drops 2 % of the test's data datagrams at random:
/// the loss hakaru reports must be that share, within binomial noise, and account for exactly
/// the datagrams the rule dropped.
#[test]
fn udp_loss_matches_nftables_drop() {
    /// Payload bytes per datagram; the rule matches this length only, so the 24-byte hello
    /// that opens the flow is never dropped.
    const LEN: u64 = 1000;
    /// Drop probability, per mille as nftables draws it.
    const PER_MILLE: u64 = 20;
    let Some(link) = Link::setup(&[("nft", "nftables")], Shaping::NONE) else {
        return;
    };
    // Each datagram must reach the rule on its own: a GSO batch crossing the veth whole would
    // be one packet whose UDP length is the batch's.
    link.segment_client_gso();
    let server = link.start_server();
    let table = NftTable {
        ns: link.server_ns.clone(),
        family: "inet",
        name: "hakaru_loss",
    };
    link.must_in_server(&["nft", "add", "table", table.family, table.name]);
    link.must_in_server(&[
        "nft",
        "add",
        "chain",
        table.family,
        table.name,
        "input",
        "{ type filter hook input priority 0; policy accept; }",
    ]);
    let rule = format!(
        "udp dport {} udp length {} numgen random mod 1000 < {PER_MILLE} counter drop",
        server.port,
        LEN + 8
    );
    let mut argv = vec!["nft", "add", "rule", table.family, table.name, "input"];
    argv.extend(rule.split_whitespace());
    link.must_in_server(&argv);

    let len = LEN.to_string();
    let doc = run_client(&link, &server, "udp", &["-b", "50M", "-l", &len, "-t", "5"]);
    let dropped = nft_counter(&link, &table, "input");
    let t = forward_totals(&doc, "udp loss");
    let u = &t["udp"];
    let (sent, received, lost) = (
        count(u, "/sent_datagrams"),
        count(u, "/received_datagrams"),
        count(u, "/lost"),
    );
    let lost_pct = num(u, "/lost_percent");
    let socket_drops = u["socket_drops"].as_u64().unwrap_or(0);
    let p = PER_MILLE as f64 / 1000.0;
    let n = sent as f64;
    let sigma = (n * p * (1.0 - p)).sqrt() / n;
    eprintln!(
        "netns udp loss: sent {sent}, received {received}, lost {lost} = {lost_pct:.4} % \
         (nftables dropped {dropped}; expected {:.1} % +/- {:.4} % at 4 sigma), duplicates {}, \
         out of order {}, socket drops {socket_drops}, receiver {:.3} Mbit/s",
        p * 100.0,
        4.0 * sigma * 100.0,
        u["duplicates"],
        u["out_of_order"],
        num(t, "/receiver/bits_per_second") / 1e6,
    );
    assert!(sent > 10_000, "too few datagrams sent ({sent}) to judge");
    assert!(
        (lost_pct / 100.0 - p).abs() <= 4.0 * sigma,
        "lost {lost_pct:.4} % is not within 4 sigma ({:.4} %) of the {:.1} % dropped",
        4.0 * sigma * 100.0,
        p * 100.0
    );
    assert_eq!(count(u, "/duplicates"), 0, "duplicates on a plain veth");
    assert_eq!(
        Some(lost),
        sent.checked_sub(received),
        "lost is not sent - received"
    );
    assert_eq!(
        lost,
        dropped + socket_drops,
        "lost is not what nftables dropped (plus socket buffer drops)"
    );
}

/// `hakaru pps` at a fixed packet rate: the datagrams the receiver counted must all have
/// crossed the server's veth, which also carries only a little else (control connection,
/// hellos, IPv6 neighbour discovery). The same holds for the interface counters hakaru itself
/// reports for the server end.
#[test]
fn pps_count_matches_veth_counter() {
    const PPS: f64 = 20_000.0;
    let Some(link) = Link::setup(&[], Shaping::NONE) else {
        return;
    };
    // A veth counts a GSO batch as one packet; split them so it counts datagrams, as a NIC
    // counts frames.
    link.segment_client_gso();
    let server = link.start_server();
    let before = link.server_rx_packets();
    let doc = run_client(
        &link,
        &server,
        "pps",
        &["--rate", "20000", "-t", "3", "-i", "0"],
    );
    let after = link.server_rx_packets();
    let veth = after - before;
    let t = forward_totals(&doc, "pps");
    let u = &t["udp"];
    // Nothing is omitted (no --omit), so every datagram that arrived is in received_datagrams.
    assert_eq!(num(&doc, "/spec/omit"), 0.0, "spec has a warm-up");
    let received = count(u, "/received_datagrams");
    let nic = &doc["server_end"]["nic"];
    let nic_rx = count(nic, "/rx_packets");
    let slack = |r: u64| r / 100 + 500;
    eprintln!(
        "netns pps: sent {} datagrams, received {received} ({:.1} pps, lost {}); server veth \
         {} rx_packets +{veth} (other packets {}); hakaru's server_end.nic {} rx_packets \
         {nic_rx} (other packets {}); allowed other packets {}",
        count(u, "/sent_datagrams"),
        num(u, "/received_pps"),
        count(u, "/lost"),
        link.server_dev,
        veth as i64 - received as i64,
        nic["interface"],
        nic_rx as i64 - received as i64,
        slack(received),
    );
    let rate = num(u, "/received_pps");
    assert!(
        (rate / PPS - 1.0).abs() <= 0.02,
        "received {rate:.1} pps, asked for {PPS}"
    );
    assert!(
        received <= veth,
        "the receiver counted {received} datagrams but only {veth} packets crossed the veth"
    );
    assert!(
        veth - received <= slack(received),
        "{} packets besides the test's datagrams crossed the veth",
        veth - received
    );
    assert_eq!(
        nic["interface"].as_str(),
        Some(link.server_dev.as_str()),
        "server_end.nic is not the test's interface"
    );
    assert!(
        received <= nic_rx,
        "the receiver counted {received} datagrams but server_end.nic.rx_packets is {nic_rx}"
    );
    assert!(
        nic_rx - received <= slack(received),
        "server_end.nic.rx_packets {nic_rx} exceeds the {received} datagrams by more than {}",
        slack(received)
    );
}

/// A sender held back by its own qdisc (tbf at 30 Mbit/s on its egress, asked for 60 Mbit/s)
/// sends about half the asked rate and the receiver sees no loss: the result says the target
/// was missed, in JSON and in the text; a rate the link carries is not flagged.
#[test]
fn a_sender_held_back_by_its_qdisc_is_flagged() {
    let Some(link) = Link::setup(&[], Shaping::client("30mbit")) else {
        return;
    };
    let server = link.start_server();
    let doc = run_client(&link, &server, "udp", &["-b", "60M", "-t", "2"]);
    let rt = &doc["totals"][0]["rate_target"];
    eprintln!("held back: {rt}");
    assert_eq!(rt["missed"], true, "{rt}");
    assert_eq!(rt["unit"], "bit/s");
    assert_eq!(rt["asked"].as_f64(), Some(60e6));
    assert!(rt["ratio"].as_f64().unwrap() < 0.7, "{rt}");
    let port = server.port_s();
    let o = link.in_client(
        &[
            bin(),
            "udp",
            &link.server_ip,
            "-p",
            &port,
            "-b",
            "60M",
            "-t",
            "2",
        ],
        CLIENT_LIMIT,
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("held back: sent"), "{text}");
    assert!(
        text.contains("WARNING: client -> server senders sent"),
        "{text}"
    );
    let ok = run_client(&link, &server, "udp", &["-b", "10M", "-t", "2"]);
    let rt = &ok["totals"][0]["rate_target"];
    assert_eq!(rt["missed"], false, "{rt}");
}

/// A receiver whose socket buffer overflows: every datagram lost was dropped at the test's
/// sockets, so the sockets' drop counters, the namespace's RcvbufErrors and hakaru's own loss
/// (sequence gaps plus the tail) are the same number. The counters are read when the flows
/// end, so drops after the last datagram that arrived are counted too.
#[test]
fn socket_buffer_drops_reconcile_with_loss() {
    let Some(link) = Link::setup(&[], Shaping::NONE) else {
        return;
    };
    // Datagrams, not GSO batches, on the veth: the receiver's kernel sees each one.
    link.segment_client_gso();
    let server = link.start_server();
    for args in [
        &["pps", "-w", "8K"][..],
        &["pps", "-P", "4", "-w", "8K"][..],
    ] {
        let mut all = args[1..].to_vec();
        all.extend_from_slice(&["-t", "2"]);
        let doc = run_client(&link, &server, args[0], &all);
        let u = &doc["totals"][0]["udp"];
        let lost = count(u, "/lost");
        let drops = count(u, "/socket_drops");
        let rcvbuf = count(&doc, "/server_end/udp_kernel/rcvbuf_errors");
        eprintln!("{args:?}: lost {lost}, socket drops {drops}, RcvbufErrors {rcvbuf}");
        assert!(
            lost > 0,
            "{args:?}: an 8 KiB buffer at full rate must overflow"
        );
        assert_eq!(drops, lost, "{args:?}: socket drops against loss");
        assert_eq!(rcvbuf, lost, "{args:?}: RcvbufErrors against loss");
    }
}

/// UDP GSO across a veth: the receiver's veth counts each GSO buffer as one packet, far fewer
/// than the datagrams its sockets received, and the result labels its packet counts as
/// buffers; with the batches split before the veth (as a real NIC splits them on the wire)
/// the counts are packets again and carry no label.
#[test]
fn gso_buffers_on_a_veth_are_labelled() {
    let Some(link) = Link::setup(&[], Shaping::NONE) else {
        return;
    };
    let server = link.start_server();
    let doc = run_client(&link, &server, "pps", &["-t", "1"]);
    let nic = &doc["server_end"]["nic"];
    let received = count(&doc, "/totals/0/udp/received_datagrams");
    eprintln!(
        "GSO: NIC rx_packets {} against {received} datagrams",
        nic["rx_packets"]
    );
    assert_eq!(doc["client"]["udp_paths"]["send"], "gso");
    assert_eq!(nic["virtual_interface"], true);
    assert_eq!(nic["packets_are_buffers"], true, "{nic}");
    assert!(count(nic, "/rx_packets") < received / 2);
    let notes = doc["notes"].to_string();
    assert!(notes.contains("packets_are_buffers"), "{notes}");
    link.segment_client_gso();
    let doc = run_client(&link, &server, "pps", &["-t", "1"]);
    let nic = &doc["server_end"]["nic"];
    assert_eq!(nic["packets_are_buffers"], false, "{nic}");
    assert!(count(nic, "/rx_packets") >= count(&doc, "/totals/0/udp/received_datagrams"));
}
