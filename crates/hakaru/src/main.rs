//! hakaru: network performance measurement in one binary.
//!
//! Exit codes: 0 success (also when stdout is a closed pipe), 1 the test or server failed,
//! 2 the command line was invalid (including names, such as an interface, that only turn out
//! wrong after parsing).

mod cli;
mod output;

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut argv: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    // iperf3's `-s` and `-c HOST` forms run the matching subcommand, named on stderr.
    match cli::habits::rewrite(&argv) {
        Ok(Some(r)) => {
            eprintln!("hakaru: iperf3-style command; running `{}`", r.native);
            argv = r.args;
        }
        Ok(None) => {}
        Err(e) => {
            eprintln!("hakaru: error: {e}");
            return ExitCode::from(2);
        }
    }
    let args = match cli::parse(&argv) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            eprintln!("hakaru: error: {e:#}");
            if cli::is_usage_error(&e) {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
