//! Launchers: how the coordinator runs a command on a host (the system ssh, `ip netns exec`,
//! the local machine, or any exec prefix such as `kubectl exec -i POD --`), and the two
//! preparations done through them: asking the remote hakaru its version, and pushing the
//! coordinator's own binary.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::file::HostSpec;

/// How to run a command on one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launcher {
    /// On this machine.
    Local,
    /// In a network namespace of this machine.
    Netns(String),
    /// Through the system ssh binary, so the user's ssh config, agent and keys apply.
    Ssh {
        /// `user@host` or a configured Host.
        dest: String,
        /// Extra arguments before the destination.
        options: Vec<String>,
    },
    /// Through a command prefix that runs its arguments on the host.
    Exec(Vec<String>),
}

impl Launcher {
    /// The launcher a host spec asks for (after `file::check`), with plan-wide ssh options.
    pub fn of(h: &HostSpec, default_ssh_options: &[String]) -> Launcher {
        if let Some(dest) = &h.ssh {
            let options = h
                .ssh_options
                .clone()
                .unwrap_or_else(|| default_ssh_options.to_vec());
            Launcher::Ssh {
                dest: dest.clone(),
                options,
            }
        } else if let Some(ns) = &h.netns {
            Launcher::Netns(ns.clone())
        } else if let Some(prefix) = &h.exec {
            Launcher::Exec(prefix.clone())
        } else {
            Launcher::Local
        }
    }

    /// True when the host is this machine (its own binary can run there as is).
    pub fn same_machine(&self) -> bool {
        matches!(self, Launcher::Local | Launcher::Netns(_))
    }

    /// How the output names it.
    pub fn describe(&self) -> String {
        match self {
            Launcher::Local => "local".into(),
            Launcher::Netns(n) => format!("netns {n}"),
            Launcher::Ssh { dest, .. } => format!("ssh {dest}"),
            Launcher::Exec(p) => format!("exec {}", p.join(" ")),
        }
    }

    /// The full command line that runs `argv` on the host.
    pub fn argv(&self, argv: &[String]) -> Vec<String> {
        match self {
            Launcher::Local => argv.to_vec(),
            Launcher::Netns(ns) => ["ip", "netns", "exec", ns]
                .iter()
                .map(|s| s.to_string())
                .chain(argv.iter().cloned())
                .collect(),
            Launcher::Ssh { dest, options } => {
                // ssh hands the remote shell one string: quote every word, and `exec` so the
                // remote process is the shell's own (its stdin is the channel).
                let remote = format!(
                    "exec {}",
                    argv.iter()
                        .map(|a| shell_quote(a))
                        .collect::<Vec<_>>()
                        .join(" ")
                );
                let mut v = vec![
                    "ssh".to_string(),
                    "-T".into(),
                    "-o".into(),
                    "BatchMode=yes".into(),
                ];
                v.extend(options.iter().cloned());
                v.push(dest.clone());
                v.push("--".into());
                v.push(remote);
                v
            }
            Launcher::Exec(prefix) => prefix.iter().chain(argv.iter()).cloned().collect(),
        }
    }

    /// A `Command` for `argv` on the host, in a process group of its own so a Ctrl-C at the
    /// terminal reaches the coordinator only (it stops everything in order).
    pub fn command(&self, argv: &[String]) -> Command {
        let full = self.argv(argv);
        let mut c = Command::new(&full[0]);
        c.args(&full[1..]);
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            c.process_group(0);
        }
        c
    }

    /// A shell command line on the host: `sh -c SCRIPT` (quoted for ssh).
    fn shell(&self, script: &str) -> Command {
        self.command(&["sh".to_string(), "-c".to_string(), script.to_string()])
    }
}

/// Quotes a word for a POSIX shell (single quotes; a quote inside becomes '\'').
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'-' | b'_' | b'.' | b'/' | b':' | b'=' | b',' | b'@' | b'+'
                )
        })
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// What running a short command through a launcher gave.
#[derive(Debug)]
pub struct Outcome {
    /// Exit code (None: killed, or it ran past the limit).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// True when it ran past the limit and was killed.
    pub timed_out: bool,
}

/// Runs a command to its end, feeding `input` on stdin, killing it after `limit`.
pub fn run_bounded(
    mut cmd: Command,
    input: Option<&[u8]>,
    limit: Duration,
) -> std::io::Result<Outcome> {
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let o = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let e = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    let w = input.map(|bytes| {
        let mut stdin = child.stdin.take();
        let bytes = bytes.to_vec();
        std::thread::spawn(move || {
            if let Some(s) = stdin.as_mut() {
                // A command that needs no input (already pushed) closes early: not an error.
                let _ = s.write_all(&bytes);
            }
        })
    });
    let started = Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break Some(st);
        }
        if started.elapsed() > limit {
            timed_out = true;
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if let Some(w) = w {
        let _ = w.join();
    }
    Ok(Outcome {
        code: status.and_then(|s| s.code()),
        stdout: o.join().unwrap_or_default(),
        stderr: e.join().unwrap_or_default(),
        timed_out,
    })
}

/// The last non-empty line of a command's stderr, for error messages.
pub fn last_line(s: &str) -> String {
    s.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_string()
}

/// Why a host cannot take part.
pub fn launch_failure(host: &str, launcher: &Launcher, hakaru: &str, o: &Outcome) -> String {
    let why = last_line(&o.stderr);
    if o.timed_out {
        return format!(
            "host `{host}`: no answer through {} within the limit (is it reachable?)",
            launcher.describe()
        );
    }
    match (launcher, o.code) {
        (Launcher::Ssh { dest, .. }, Some(255)) => {
            format!("host `{host}`: cannot reach it with ssh {dest}: {why}")
        }
        (Launcher::Netns(_), _) if why.contains("exec of") => format!(
            "host `{host}`: hakaru not found or not executable at `{hakaru}` there ({why}); set hakaru = \"/path/to/hakaru\" or push = true"
        ),
        (_, Some(126 | 127)) => format!(
            "host `{host}`: hakaru not found or not executable at `{hakaru}` there ({why}); set hakaru = \"/path/to/hakaru\" or push = true"
        ),
        (Launcher::Netns(ns), _) if why.contains("netns") || why.contains("Cannot open") => {
            format!("host `{host}`: network namespace `{ns}` is not usable: {why}")
        }
        _ => format!(
            "host `{host}`: `{hakaru} --version` through {} failed (exit {}): {why}",
            launcher.describe(),
            o.code.map_or("none".into(), |c| c.to_string())
        ),
    }
}

/// Asks the hakaru at `path` on the host for its version (`hakaru 0.1.0`).
pub fn probe_version(
    host: &str,
    launcher: &Launcher,
    path: &str,
    limit: Duration,
) -> Result<String, String> {
    let cmd = launcher.command(&[path.to_string(), "--version".to_string()]);
    let o = run_bounded(cmd, None, limit).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound && *launcher == Launcher::Local {
            format!(
                "host `{host}`: hakaru not found at `{path}` there ({e}); set hakaru = \"/path/to/hakaru\" or push = true"
            )
        } else {
            format!("host `{host}`: cannot start {}: {e}", launcher.describe())
        }
    })?;
    if o.code != Some(0) {
        return Err(launch_failure(host, launcher, path, &o));
    }
    let v = o.stdout.trim().to_string();
    if !v.starts_with("hakaru ") {
        return Err(format!(
            "host `{host}`: `{path} --version` printed `{}`, not a hakaru version",
            last_line(&v)
        ));
    }
    Ok(v)
}

/// A 64-bit FNV-1a digest, enough to name a pushed binary by its content.
pub fn digest(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Where a pushed binary lives on the far host.
pub fn push_path(binary: &[u8]) -> String {
    format!(
        "/tmp/hakaru-{}-{:016x}",
        env!("CARGO_PKG_VERSION"),
        digest(binary)
    )
}

/// Copies `binary` to `path` on the host over the launcher's stdin, unless a file of that
/// name (named by its digest) is already there.
pub fn push(
    host: &str,
    launcher: &Launcher,
    binary: &[u8],
    path: &str,
    limit: Duration,
) -> Result<(), String> {
    let p = shell_quote(path);
    let script = format!(
        "if [ -x {p} ]; then exit 0; fi; t={p}.$$; cat > \"$t\" && chmod 755 \"$t\" && mv \"$t\" {p}"
    );
    let o = run_bounded(launcher.shell(&script), Some(binary), limit)
        .map_err(|e| format!("host `{host}`: cannot start {}: {e}", launcher.describe()))?;
    if o.code == Some(0) {
        return Ok(());
    }
    if o.timed_out {
        return Err(format!(
            "host `{host}`: copying hakaru to {path} through {} took longer than {} s",
            launcher.describe(),
            limit.as_secs()
        ));
    }
    if let (Launcher::Ssh { dest, .. }, Some(255)) = (launcher, o.code) {
        return Err(format!(
            "host `{host}`: cannot reach it with ssh {dest}: {}",
            last_line(&o.stderr)
        ));
    }
    Err(format!(
        "host `{host}`: copying hakaru to {path} failed (exit {}): {}",
        o.code.map_or("none".into(), |c| c.to_string()),
        last_line(&o.stderr)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn quoting_survives_a_shell() {
        for w in [
            "plain",
            "with space",
            "it's",
            "$(rm -rf /)",
            "",
            "a\"b",
            "-P",
        ] {
            let q = shell_quote(w);
            let o = std::process::Command::new("sh")
                .args(["-c", &format!("printf %s {q}")])
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&o.stdout), w, "quoted as {q}");
        }
        assert_eq!(shell_quote("10.0.0.1"), "10.0.0.1");
    }

    #[test]
    fn launchers_build_their_command_lines() {
        let argv = s(&["hakaru", "tcp", "10.0.0.1", "-b", "1 G"]);
        assert_eq!(Launcher::Local.argv(&argv), argv);
        assert_eq!(
            Launcher::Netns("rx".into()).argv(&argv)[..5],
            s(&["ip", "netns", "exec", "rx", "hakaru"])[..]
        );
        let ssh = Launcher::Ssh {
            dest: "root@h".into(),
            options: s(&["-i", "k"]),
        }
        .argv(&argv);
        assert_eq!(
            ssh,
            s(&[
                "ssh",
                "-T",
                "-o",
                "BatchMode=yes",
                "-i",
                "k",
                "root@h",
                "--",
                "exec hakaru tcp 10.0.0.1 -b '1 G'"
            ])
        );
        let k = Launcher::Exec(s(&["kubectl", "exec", "-i", "pod", "--"])).argv(&argv);
        assert_eq!(k.len(), 10);
        assert_eq!(k[5], "hakaru");
    }

    #[test]
    fn version_probe_and_push_through_a_local_launcher() {
        let dir = std::env::temp_dir().join(format!("hakaru-plan-push-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("fake");
        std::fs::write(&fake, "#!/bin/sh\necho 'hakaru 9.9.9'\n").unwrap();
        let l = Launcher::Local;
        let path = dir.join("pushed").to_string_lossy().to_string();
        push(
            "h",
            &l,
            &std::fs::read(&fake).unwrap(),
            &path,
            Duration::from_secs(10),
        )
        .unwrap();
        // Pushing again finds it there and reads nothing.
        push("h", &l, b"other", &path, Duration::from_secs(10)).unwrap();
        assert_eq!(
            probe_version("h", &l, &path, Duration::from_secs(10)).unwrap(),
            "hakaru 9.9.9"
        );
        let missing = dir.join("missing").to_string_lossy().to_string();
        let e = probe_version("h", &l, &missing, Duration::from_secs(10)).unwrap_err();
        assert!(e.contains("not found") || e.contains("cannot start"), "{e}");
        let e = probe_version("h", &l, "/bin/true", Duration::from_secs(10)).unwrap_err();
        assert!(e.contains("not a hakaru version"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
