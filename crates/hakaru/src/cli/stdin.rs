//! Lines of standard input that hold a secret (`--psk-file -`, `--netperf-passphrase-file -`):
//! read one at a time and nothing past it, so the rest stays for the next reader.

/// The next line of standard input (at most `limit` bytes) for `flag`
/// (`--netperf-passphrase-file -`): the second when `--psk-file -` has read the first.
pub fn stdin_line(flag: &str, what: &str, limit: usize) -> Result<String, String> {
    read_line_of(&mut std::io::stdin().lock(), flag, what, limit)
}

/// Reads one line holding `what` from `r`, and nothing past it.
pub(super) fn read_line_of(
    r: &mut impl std::io::BufRead,
    flag: &str,
    what: &str,
    limit: usize,
) -> Result<String, String> {
    use std::io::{BufRead, Read};
    // A longer line is not what was asked: stop there rather than read without end.
    let cap = limit as u64 + 2;
    let mut line = String::new();
    let n = r
        .take(cap)
        .read_line(&mut line)
        .map_err(|e| format!("{flag}: cannot read standard input: {e}"))?;
    if n == 0 {
        return Err(format!(
            "{flag}: standard input ended before a line with {what}"
        ));
    }
    if !line.ends_with('\n') && n as u64 == cap {
        return Err(format!(
            "{flag}: the line of standard input is longer than {limit} bytes; it is not {what}"
        ));
    }
    Ok(line)
}
