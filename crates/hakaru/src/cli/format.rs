//! `--format` on the command line: its values, their parsing and their help come from the
//! exporters (`hakaru_report::export`); each subcommand offers the formats that can write
//! its document.

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use hakaru_report::export::{formats_for, run_document, DocKind, Format, RunKind};

/// The document `hakaru COMMAND` prints, for the subcommands with the shared `--format` flags:
/// a test's result (the report crate knows which test subcommand prints which), `quick`'s
/// screen, `nic`'s table.
pub fn document_of(command: &str) -> Option<DocKind> {
    match command {
        "quick" => Some(DocKind::Quick),
        "nic" => Some(DocKind::Nic),
        _ => run_document(command).map(DocKind::Run),
    }
}

/// `--format`'s parser for a command that prints `doc`: the formats that can write it, each
/// with its help.
pub fn parser(doc: DocKind) -> impl TypedValueParser<Value = Format> {
    let values: Vec<PossibleValue> = formats_for(doc)
        .into_iter()
        .map(|f| PossibleValue::new(f.name()).help(f.exporter().help(doc)))
        .collect();
    PossibleValuesParser::new(values).map(named)
}

/// The same with the names alone, as [`crate::cli::command`] narrows the shared flags to a
/// subcommand's document (which keeps that subcommand's help in its short layout).
pub fn names(doc: DocKind) -> impl TypedValueParser<Value = Format> {
    let values: Vec<&'static str> = formats_for(doc).iter().map(|f| f.name()).collect();
    PossibleValuesParser::new(values).map(named)
}

/// Whether a subcommand printing `doc` offers fewer formats than [`any_run`] (tcp, udp and pps
/// offer them all and keep its parser, with each value's help).
pub fn narrows(doc: DocKind) -> bool {
    formats_for(doc) != formats_for(DocKind::Run(RunKind::TCP))
}

fn named(v: String) -> Format {
    Format::named(&v).unwrap_or_else(Format::text)
}

/// The parser of the shared flags before [`crate::cli::command`] narrows it per subcommand:
/// every format of a test result.
pub fn any_run() -> impl TypedValueParser<Value = Format> {
    parser(DocKind::Run(RunKind::TCP))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The subcommands that print a document of [`document_of`]'s, with it.
    fn documents() -> Vec<(String, DocKind)> {
        let cmd = crate::cli::command();
        let subs = cmd.get_subcommands().map(|c| c.get_name().to_string());
        let docs: Vec<_> = subs
            .filter_map(|n| Some((n.clone(), document_of(&n)?)))
            .collect();
        // Every test subcommand (tcp ... source), quick and nic.
        assert_eq!(docs.len(), 12, "{docs:?}");
        docs
    }

    #[test]
    fn every_listed_command_offers_text_and_json() {
        for (name, doc) in documents() {
            let names: Vec<&str> = formats_for(doc).iter().map(|f| f.name()).collect();
            assert!(names.starts_with(&["text", "json"]), "{name}: {names:?}");
        }
        assert_eq!(document_of("pps"), Some(DocKind::Run(RunKind::PPS)));
        assert_eq!(document_of("server"), None);
    }

    /// `--format`'s values on the command line, as clap offers them.
    fn offered(cmd: &clap::Command, path: &[&str]) -> Vec<String> {
        let mut c = cmd;
        for p in path {
            c = c.find_subcommand(p).expect(p);
        }
        let arg = c.get_arguments().find(|a| a.get_id() == "format");
        arg.expect("--format")
            .get_possible_values()
            .iter()
            .map(|v| v.get_name().to_string())
            .collect()
    }

    #[test]
    fn format_values_and_help_come_from_the_registry() {
        let mut cmd = crate::cli::command();
        let names = |d| -> Vec<String> {
            formats_for(d)
                .iter()
                .map(|f| f.name().to_string())
                .collect()
        };
        for (sub, doc) in documents() {
            assert_eq!(offered(&cmd, &[&sub]), names(doc), "{sub}");
        }
        assert_eq!(offered(&cmd, &["plan", "run"]), names(DocKind::Plan));
        assert_eq!(offered(&cmd, &["history"]), ["text", "json", "csv"]);
        assert_eq!(offered(&cmd, &["compare"]), ["text", "json", "markdown"]);
        assert_eq!(offered(&cmd, &["latency"]).len(), 5);
        // tcp offers every format of a test result, each with its exporter's help.
        let tcp = cmd.find_subcommand_mut("tcp").expect("tcp");
        let help = tcp.render_long_help().to_string();
        for f in formats_for(DocKind::Run(RunKind::TCP)) {
            let line = format!("- {}:", f.name());
            assert!(help.contains(&line), "{line} in {help}");
        }
        assert!(
            help.contains("The shape of `iperf3 -J` at the end"),
            "{help}"
        );
    }
}
