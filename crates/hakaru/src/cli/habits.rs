//! iperf3 muscle memory: `hakaru -s`, `hakaru -c HOST [-u] ...` are rewritten to the native
//! subcommand before parsing, with iperf3's flags mapped where they mean the same thing.
//!
//! The rewrite is a pure function over the arguments so every mapping is unit-tested; `main`
//! prints the native command it runs on stderr, so the habit teaches the real spelling.

use std::fmt;

/// Why an iperf3-style command line cannot be run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HabitError(pub String);

impl fmt::Display for HabitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// iperf3 client flags that take a value and pass through unchanged (same letter, same meaning
/// in hakaru tcp/udp).
const SAME_WITH_VALUE: &[&str] = &[
    "-t",
    "--time",
    "-n",
    "--bytes",
    "-k",
    "--blockcount",
    "-P",
    "--parallel",
    "-w",
    "--window",
    "-O",
    "--omit",
    "-i",
    "--interval",
    "-p",
    "--port",
    "-B",
    "--bind",
    "-l",
    "--length",
    "-C",
    "--congestion",
    "-M",
    "--set-mss",
    "-S",
    "--tos",
    "--dscp",
    "-b",
    "--bitrate",
];

/// iperf3 flags without a value that pass through unchanged.
const SAME_SWITCH: &[&str] = &[
    "-R",
    "--reverse",
    "--bidir",
    "-4",
    "--version4",
    "-6",
    "--version6",
    "-N",
    "--no-delay",
    "-Z",
    "--zerocopy",
    "-J",
    "--json",
    "--json-stream",
    "-q",
    "--summary-only",
];

/// iperf3 flags hakaru has no counterpart for, with what to do instead.
const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "-D",
        "run `hakaru server` under systemd or nohup; it does not daemonize itself",
    ),
    (
        "--daemon",
        "run `hakaru server` under systemd or nohup; it does not daemonize itself",
    ),
    (
        "-1",
        "hakaru server serves until stopped (--exit-on-stdin-eof ties it to a pipe)",
    ),
    (
        "--one-off",
        "hakaru server serves until stopped (--exit-on-stdin-eof ties it to a pipe)",
    ),
    (
        "-F",
        "hakaru sends generated data; use `hakaru source --stdin < FILE` to send a file",
    ),
    (
        "--file",
        "hakaru sends generated data; use `hakaru source --stdin < FILE` to send a file",
    ),
    (
        "-f",
        "hakaru picks units itself; --json has every figure in bits and bytes",
    ),
    ("--logfile", "redirect standard output (and stderr) instead"),
    (
        "-T",
        "hakaru has no title; --json carries the command and the time",
    ),
    (
        "--title",
        "hakaru has no title; --json carries the command and the time",
    ),
    (
        "--cport",
        "hakaru gives each flow its own port; -B chooses the local address",
    ),
    (
        "--get-server-output",
        "the server's figures are always part of hakaru's result",
    ),
];

/// A rewritten command line and the native command to show the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    /// The arguments to parse, program name first.
    pub args: Vec<String>,
    /// The native command, for the one line on stderr.
    pub native: String,
}

fn is_flag(a: &str) -> bool {
    a.starts_with('-') && a.len() > 1
}

/// Recognises iperf3's client and server forms. `None` when the command line is not one of
/// them (a native hakaru command line, `--help`, `--version`, or nothing).
pub fn rewrite(args: &[String]) -> Result<Option<Rewrite>, HabitError> {
    let Some(first) = args.get(1) else {
        return Ok(None);
    };
    // A native command line starts with a subcommand (global -v may come first).
    let leading_verbose =
        |a: &str| a == "--verbose" || (a.starts_with("-v") && a[1..].chars().all(|c| c == 'v'));
    let first_non_verbose = args[1..].iter().find(|a| !leading_verbose(a));
    match first_non_verbose {
        Some(a) if is_flag(a) => {}
        _ => return Ok(None),
    }
    if !is_flag(first) {
        return Ok(None);
    }
    let rest = &args[1..];
    let server = rest.iter().any(|a| a == "-s" || a == "--server");
    let client = rest.iter().any(|a| {
        a == "-c"
            || a == "--client"
            || a.starts_with("--client=")
            || (a.starts_with("-c") && a.len() > 2 && !a.starts_with("--"))
    });
    match (server, client) {
        (false, false) => Ok(None),
        (true, true) => Err(HabitError(
            "-s and -c together: iperf3's -s runs a server, -c a client; give one".into(),
        )),
        (true, false) => server_form(args).map(Some),
        (false, true) => client_form(args).map(Some),
    }
}

/// Splits `--name=value` into its parts; other arguments come back whole.
fn split_eq(a: &str) -> (&str, Option<&str>) {
    match a.split_once('=') {
        Some((n, v)) if a.starts_with("--") => (n, Some(v)),
        _ => (a, None),
    }
}

/// Checks an argument against the unsupported list.
fn unsupported(name: &str) -> Result<(), HabitError> {
    if let Some((flag, instead)) = UNSUPPORTED.iter().find(|(f, _)| *f == name) {
        return Err(HabitError(format!(
            "iperf3's {flag} has no hakaru counterpart: {instead}"
        )));
    }
    Ok(())
}

/// `--format`: iperf3's long form of `-f` (a unit letter: k, m, g, t, K, M, G, T) is refused
/// with -f's advice; any other value is hakaru's own `--format` (text, json, csv, ...) and
/// passes through.
fn format_value(
    inline: Option<&str>,
    it: &mut std::slice::Iter<'_, String>,
) -> Result<String, HabitError> {
    let v = value("--format", inline, it)?;
    if matches!(v.as_str(), "k" | "m" | "g" | "t" | "K" | "M" | "G" | "T") {
        let instead = UNSUPPORTED
            .iter()
            .find(|(f, _)| *f == "-f")
            .map_or("", |(_, i)| *i);
        // The formats of a test result, as the exporters list them.
        use hakaru_report::export::{formats_for, or_list, DocKind, RunKind};
        let names: Vec<&str> = formats_for(DocKind::Run(RunKind::TCP))
            .iter()
            .map(|f| f.name())
            .collect();
        return Err(HabitError(format!(
            "iperf3's --format {v} (the long form of -f) has no hakaru counterpart: {instead}; hakaru's --format takes {}",
            or_list(&names)
        )));
    }
    Ok(v)
}

fn server_form(args: &[String]) -> Result<Rewrite, HabitError> {
    let mut out = vec![args[0].clone(), "server".to_string()];
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        let (name, inline) = split_eq(a);
        match name {
            "-s" | "--server" => {}
            "-V" | "--verbose" => out.push("-v".into()),
            "-p" | "--port" | "-B" | "--bind" => {
                out.push(name.into());
                out.push(value(name, inline, &mut it)?);
            }
            "-4" | "--version4" => out.push("-4".into()),
            "-6" | "--version6" => out.push("-6".into()),
            "--format" => {
                out.push(name.into());
                out.push(format_value(inline, &mut it)?);
            }
            "-J" | "--json" => {
                return Err(HabitError(
                    "iperf3's -s -J has no hakaru counterpart: the server logs one line per test; ask for JSON on the client (-J there)".into(),
                ))
            }
            _ => {
                unsupported(name)?;
                out.push(a.clone());
            }
        }
    }
    let native = native_line(&out);
    Ok(Rewrite { args: out, native })
}

fn value(
    name: &str,
    inline: Option<&str>,
    it: &mut std::slice::Iter<'_, String>,
) -> Result<String, HabitError> {
    match inline {
        Some(v) => Ok(v.to_string()),
        None => it
            .next()
            .cloned()
            .ok_or_else(|| HabitError(format!("{name} needs a value"))),
    }
}

fn client_form(args: &[String]) -> Result<Rewrite, HabitError> {
    let udp = args[1..].iter().any(|a| a == "-u" || a == "--udp");
    let mut host: Option<String> = None;
    let mut flags: Vec<String> = Vec::new();
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        let (name, inline) = split_eq(a);
        match name {
            "-u" | "--udp" => {}
            "-c" | "--client" => host = Some(value(name, inline, &mut it)?),
            n if n.starts_with("-c") && !n.starts_with("--") => host = Some(n[2..].to_string()),
            "-V" | "--verbose" => flags.push("-v".into()),
            "-A" | "--affinity" => {
                // iperf3 -A n[,m]: this end's CPU n, the server's CPU m.
                let v = value(name, inline, &mut it)?;
                let (mine, theirs) = match v.split_once(',') {
                    Some((a, b)) => (a.to_string(), Some(b.to_string())),
                    None => (v, None),
                };
                flags.extend(["-A".into(), mine]);
                if let Some(t) = theirs {
                    flags.extend(["--server-affinity".into(), t]);
                }
            }
            "--connect-timeout" => {
                // iperf3 counts milliseconds.
                let v = value(name, inline, &mut it)?;
                let ms: u64 = v.parse().map_err(|_| {
                    HabitError(format!(
                        "--connect-timeout {v}: iperf3's value is whole milliseconds"
                    ))
                })?;
                flags.extend(["--connect-timeout".into(), format!("{ms}ms")]);
            }
            "-k" | "--blockcount" => {
                flags.push("-k".into());
                flags.push(value(name, inline, &mut it)?);
            }
            "--set-mss" => {
                flags.push("-M".into());
                flags.push(value(name, inline, &mut it)?);
            }
            "--format" => {
                flags.push(name.into());
                flags.push(format_value(inline, &mut it)?);
            }
            n if SAME_WITH_VALUE.contains(&n) => {
                flags.push(n.into());
                flags.push(value(name, inline, &mut it)?);
            }
            n if SAME_SWITCH.contains(&n) => flags.push(match n {
                "--version4" => "-4".into(),
                "--version6" => "-6".into(),
                other => other.into(),
            }),
            _ => {
                unsupported(name)?;
                flags.push(a.clone());
            }
        }
    }
    let Some(host) = host.filter(|h| !h.is_empty()) else {
        return Err(HabitError("-c needs the server's address: -c HOST".into()));
    };
    let mut out = vec![
        args[0].clone(),
        if udp { "udp" } else { "tcp" }.to_string(),
        host,
    ];
    out.extend(flags);
    let native = native_line(&out);
    Ok(Rewrite { args: out, native })
}

/// The command as a user would type it (program name shown as `hakaru`).
fn native_line(args: &[String]) -> String {
    let mut s = String::from("hakaru");
    for a in &args[1..] {
        s.push(' ');
        if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"$`\\".contains(c)) {
            s.push('\'');
            s.push_str(&a.replace('\'', "'\\''"));
            s.push('\'');
        } else {
            s.push_str(a);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rw(s: &str) -> Result<Option<Rewrite>, HabitError> {
        let args: Vec<String> = std::iter::once("hakaru")
            .chain(s.split_whitespace())
            .map(String::from)
            .collect();
        rewrite(&args)
    }

    fn native(s: &str) -> String {
        rw(s).expect("rewrite").expect("an iperf3 form").native
    }

    #[test]
    fn native_command_lines_are_left_alone() {
        for s in [
            "tcp 10.0.0.1 -c 3",
            "server -p 5201",
            "-v tcp -t 1",
            "--help",
            "--version",
            "nic -c 3",
            "",
        ] {
            assert_eq!(rw(s), Ok(None), "{s}");
        }
    }

    #[test]
    fn server_form() {
        assert_eq!(native("-s"), "hakaru server");
        assert_eq!(
            native("-s -p 5202 -B 127.0.0.1"),
            "hakaru server -p 5202 -B 127.0.0.1"
        );
        assert_eq!(native("-p 5202 -s"), "hakaru server -p 5202");
        assert_eq!(native("-s -V"), "hakaru server -v");
        assert!(rw("-s -D").unwrap_err().0.contains("-D"));
        assert!(rw("-s -1").unwrap_err().0.contains("serves until stopped"));
        assert!(rw("-s -J").unwrap_err().0.contains("on the client"));
    }

    #[test]
    fn client_form_picks_tcp_or_udp_and_maps_flags() {
        assert_eq!(native("-c 10.0.0.1"), "hakaru tcp 10.0.0.1");
        assert_eq!(
            native("-c 10.0.0.1 -t 5 -P 4 -R -J"),
            "hakaru tcp 10.0.0.1 -t 5 -P 4 -R -J"
        );
        assert_eq!(
            native("-u -c 10.0.0.1 -b 100M -l 1400"),
            "hakaru udp 10.0.0.1 -b 100M -l 1400"
        );
        assert_eq!(native("--client=h --time=3"), "hakaru tcp h --time 3");
        assert_eq!(native("-ch -t 1"), "hakaru tcp h -t 1");
        assert_eq!(
            native("-c h -A 1,0 --connect-timeout 2500"),
            "hakaru tcp h -A 1 --server-affinity 0 --connect-timeout 2500ms"
        );
        assert_eq!(native("-c h --set-mss 1000 -4"), "hakaru tcp h -M 1000 -4");
        assert_eq!(native("-c h --version6"), "hakaru tcp h -6");
        // -b without -u paces TCP, as iperf3's does.
        assert_eq!(native("-c h -b 50M -P 4"), "hakaru tcp h -b 50M -P 4");
        // Unknown flags pass through for the subcommand's own parser to name.
        assert_eq!(native("-c h --frobnicate"), "hakaru tcp h --frobnicate");
    }

    #[test]
    fn client_form_errors_name_the_problem() {
        assert!(rw("-c").unwrap_err().0.contains("-c needs"));
        assert!(rw("-c h -F f").unwrap_err().0.contains("source --stdin"));
        assert!(rw("-c h -s").unwrap_err().0.contains("-s and -c"));
        assert!(rw("-c h --connect-timeout 1s")
            .unwrap_err()
            .0
            .contains("milliseconds"));
        assert!(rw("-c h -t").unwrap_err().0.contains("-t needs a value"));
        // iperf3's --format (the long form of -f) is refused like -f, with -f's advice.
        let f = rw("-c h -f m").unwrap_err().0;
        for s in ["-c h --format m", "-c h --format=G", "-s --format k"] {
            let e = rw(s).unwrap_err().0;
            assert!(
                e.contains("--format") && e.contains("long form of -f"),
                "{s}: {e}"
            );
            assert!(
                e.contains("hakaru picks units itself") && f.contains("hakaru picks units itself"),
                "{e}"
            );
        }
        // hakaru's own --format values still pass through.
        assert!(native("-c h --format json").contains("--format json"));
    }
}
