//! `hakaru quick` as text: one line per test as it ends, and the lines under them.

use hakaru_model::{QuickLine, QuickResult};

/// The lines under the results: the server, what each line is, and loopback caveats.
pub fn footer(q: &QuickResult, time: Option<&str>) -> String {
    let mut footer = format!(
        "server {}{}; each line is one {}test; in brackets its command alone (hakaru CMD HOST ...); --json has every full result\n",
        q.server,
        if q.embedded_server { " (embedded loopback server: both ends share this machine)" } else { "" },
        time.map(|t| format!("{t} ")).unwrap_or_default()
    );
    footer.push_str(&loopback_loss_note(q));
    footer
}

/// The screen `hakaru quick` printed, from its result (`hakaru history show`).
pub fn screen(q: &QuickResult, view: &crate::View) -> String {
    let mut s = String::new();
    for l in &q.lines {
        s.push_str(&view.fit(text_line(l)));
    }
    s + &view.fit(footer(q, None))
}

/// One line of the screen: what, the headline, the command without `hakaru` and `HOST`.
pub fn text_line(l: &QuickLine) -> String {
    let cmd = l
        .command
        .strip_prefix("hakaru ")
        .unwrap_or(&l.command)
        .replacen(" HOST", "", 1);
    match &l.error {
        None => format!("{:<30} {:<46} [{cmd}]\n", l.what, l.headline),
        Some(e) => format!("{:<30} FAILED: {e} [{cmd}]\n", l.what),
    }
}

/// Loss in the packet-rate line on an embedded loopback run, explained: it is the receiving
/// socket overflowing, not a path dropping packets.
fn loopback_loss_note(q: &QuickResult) -> String {
    let lost = q
        .results
        .iter()
        .flatten()
        .filter_map(|r| r.totals.first().and_then(|t| t.udp))
        .map(|u| u.lost_percent)
        .fold(0.0, f64::max);
    if !q.embedded_server || lost < 0.01 {
        return String::new();
    }
    format!(
        "note: the packet-rate loss ({lost:.2} %) is datagrams the receiving socket had no room for: on loopback both ends share this machine's CPUs and the sender, with less work per datagram, outruns the receiver. Against a server on another machine the line measures that receiver and the path.\n"
    )
}
