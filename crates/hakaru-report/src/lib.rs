//! hakaru-report: renderers. Each output format is one module over the model's types;
//! each returns text and never prints.

#[cfg(feature = "charts")]
mod bulk_charts;
pub mod capacity_text;
#[cfg(feature = "charts")]
pub mod charts;
pub mod compare;
#[cfg(feature = "charts")]
mod compare_html;
mod compare_metrics;
#[cfg(feature = "charts")]
mod connect_charts;
pub mod connect_text;
pub mod csv;
pub mod export;
pub mod history;
#[cfg(feature = "charts")]
pub mod html;
pub mod http_text;
mod input;
pub mod iperf3_json;
pub mod iperf3_text;
mod iperf3_view;
pub mod json;
pub mod jsonl;
#[cfg(feature = "charts")]
mod kind_charts;
mod kind_text;
mod kinds;
#[cfg(feature = "charts")]
mod latency_charts;
pub mod latency_text;
#[cfg(feature = "charts")]
mod mesh_html;
pub mod nic;
#[cfg(feature = "charts")]
mod plan_matrix;
pub mod plan_text;
#[cfg(feature = "charts")]
mod probe_charts;
pub mod probe_text;
pub mod prometheus;
pub mod quick_text;
#[cfg(feature = "charts")]
mod raw_charts;
pub mod raw_text;
#[cfg(feature = "charts")]
mod rpm_charts;
pub mod rpm_text;
pub mod schema;
pub mod summary;
pub mod text;
pub mod text_parts;
pub mod trend;
pub mod udp_text;
#[cfg(feature = "charts")]
mod udpst_charts;
pub mod udpst_text;

/// How much of a human text report to show. JSON output always carries everything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct View {
    /// Only the per-direction sums and the closing headline (`-q`, `--summary-only`).
    pub summary_only: bool,
    /// Per-flow rows even above [`View::MAX_FLOW_ROWS`] flows per direction (`--per-flow`).
    pub per_flow: bool,
    /// Every column, and no folding of long lines to [`View::WIDTH`] (`--wide`).
    pub wide: bool,
}

impl View {
    /// Columns the default text output fits in.
    pub const WIDTH: usize = 100;
    /// Flows per direction up to which per-flow rows are shown without `--per-flow`.
    pub const MAX_FLOW_ROWS: usize = 8;

    /// Whether to print one row per flow when a direction has `flows` flows.
    pub fn flow_rows(&self, flows: usize) -> bool {
        self.per_flow || flows <= Self::MAX_FLOW_ROWS
    }

    /// `text` with lines longer than [`View::WIDTH`] folded, unless the view is wide.
    pub fn fit(&self, text: String) -> String {
        if self.wide {
            text
        } else {
            fold(&text, Self::WIDTH)
        }
    }
}

/// Folds each line longer than `width` at spaces; continuation lines keep the line's own
/// indent plus four spaces. Runs of spaces inside a line are kept (tables stay aligned); a
/// word longer than the width stays whole on its own line.
pub fn fold(text: &str, width: usize) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for line in text.split_inclusive('\n') {
        let (body, nl) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        if body.chars().count() <= width {
            out.push_str(line);
            continue;
        }
        let indent = body.len() - body.trim_start_matches(' ').len();
        let cont = " ".repeat((indent + 4).min(width / 2));
        let mut cur = String::from(&body[..indent]);
        let mut cur_len = indent;
        let mut fresh = true;
        // Each token is the spaces before a word and the word.
        for (gap, word) in tokens(&body[indent..]) {
            let (gl, wl) = (gap.chars().count(), word.chars().count());
            if !fresh && cur_len + gl + wl > width {
                out.push_str(cur.trim_end());
                out.push('\n');
                cur = cont.clone();
                cur_len = cont.len();
                fresh = true;
            }
            if !fresh {
                cur.push_str(gap);
                cur_len += gl;
            }
            cur.push_str(word);
            cur_len += wl;
            fresh = false;
        }
        out.push_str(cur.trim_end());
        out.push_str(nl);
    }
    out
}

/// Splits `s` into (spaces before, word) pairs.
fn tokens(s: &str) -> Vec<(&str, &str)> {
    let mut v = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let word_at = rest.len() - rest.trim_start_matches(' ').len();
        let (gap, tail) = rest.split_at(word_at);
        let word_len = tail.find(' ').unwrap_or(tail.len());
        let (word, after) = tail.split_at(word_len);
        if !word.is_empty() {
            v.push((gap, word));
        }
        rest = after;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result from tests/fixtures/hakaru/NAME.json.
    pub(crate) fn fixture(name: &str) -> hakaru_model::RunResult {
        let text = std::fs::read_to_string(format!(
            "{}/tests/fixtures/hakaru/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .expect("fixture");
        serde_json::from_str(&text).expect("fixture parses")
    }

    #[test]
    fn fold_keeps_short_lines_and_folds_long_ones_at_spaces() {
        assert_eq!(fold("short\nline\n", 10), "short\nline\n");
        let long = "  note: aaaa bbbb cccc dddd eeee\n";
        let f = fold(long, 16);
        assert_eq!(f, "  note: aaaa\n      bbbb cccc\n      dddd eeee\n");
        assert!(f.lines().all(|l| l.len() <= 16), "{f}");
        // Every word survives, in order.
        let words: Vec<&str> = f.split_whitespace().collect();
        assert_eq!(words, long.split_whitespace().collect::<Vec<_>>());
        // A word longer than the width is kept whole.
        assert_eq!(
            fold("x abcdefghijklmnop y", 8),
            "x\n    abcdefghijklmnop\n    y"
        );
    }

    #[test]
    fn flow_rows_hide_above_eight_unless_asked() {
        let v = View::default();
        assert!(v.flow_rows(8) && !v.flow_rows(9));
        let p = View {
            per_flow: true,
            ..View::default()
        };
        assert!(p.flow_rows(1024));
        assert_eq!(
            View {
                wide: true,
                ..View::default()
            }
            .fit("a ".repeat(80)),
            "a ".repeat(80)
        );
    }
}

#[cfg(all(test, feature = "charts"))]
mod html_tests;
