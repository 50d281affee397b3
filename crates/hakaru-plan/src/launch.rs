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
    /// The launcher a host spec asks for (after `check::check`), with plan-wide ssh options.
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
        // os-layer: std sets a process group on Unix only; the plan crate has no sys layer.
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            c.process_group(0);
        }
        c
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

/// The binary `push` copies: the coordinator's own, with its SHA-256 (lower-case hex).
pub struct Image {
    /// The file's bytes.
    pub bytes: Vec<u8>,
    /// SHA-256 of `bytes`, lower-case hex.
    pub sha256: String,
}

impl Image {
    /// An image of `bytes`.
    pub fn new(bytes: Vec<u8>) -> Image {
        let sha256 = sha256_hex(&bytes);
        Image { bytes, sha256 }
    }

    /// The file name a push gives it: `hakaru-VERSION-SHA256`.
    pub fn file_name(&self) -> String {
        format!("hakaru-{}-{}", env!("CARGO_PKG_VERSION"), self.sha256)
    }
}

/// SHA-256 of `bytes`, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What a push did on the far host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// The verified binary there, to run.
    pub path: String,
    /// True when a verified copy from an earlier push was there and nothing was copied.
    pub reused: bool,
    /// What was found and replaced (a file at that name that did not verify, and why).
    pub notes: Vec<String>,
}

/// The far host's half of `push` (POSIX sh; `$1` the SHA-256 wanted, `$2` the version).
///
/// The binary goes to a directory of the remote user's own, `${XDG_CACHE_HOME:-$HOME/.cache}/
/// hakaru`, created 0700 and checked to be a directory owned by that user that nobody else may
/// write (its parent too: owned by the user or root, and not group or world writable). A file
/// there is run only once it verifies: a regular file owned by the user, writable by nobody
/// else, executable, whose SHA-256 (`sha256sum`, else `shasum -a 256`) is the coordinator's.
/// A verified file of that name is reused; one that does not verify is removed and replaced.
/// The copy is written to a temporary name, verified, renamed into place and verified again.
/// The last line on stdout is `pushed PATH` or `reused PATH`; `replacing PATH: WHY` lines
/// come before it; errors go to stderr as `hakaru-push: ...` with a non-zero exit.
const PUSH_SCRIPT: &str = r#"set -u; set -f
want=$1; name=hakaru-$2-$1
say() { printf 'hakaru-push: %s\n' "$*" >&2; }
u=$(id -u) || { say "cannot tell the user id (id -u)"; exit 90; }
if command -v sha256sum >/dev/null 2>&1; then sum() { sha256sum < "$1"; }
elif command -v shasum >/dev/null 2>&1; then sum() { shasum -a 256 < "$1"; }
else say "no sha256sum (or shasum) on this host to verify a pushed binary with; install one (coreutils), or install hakaru there and set hakaru = PATH instead of push"; exit 91; fi
# ours PATH TYPE: PATH is a TYPE (d or -) of this user that no one else may write.
ours() { t=$2; set -- $(ls -ldn "$1" 2>/dev/null); [ $# -ge 3 ] && [ "$3" = "$u" ] || return 1
  case $1 in ?????w*|????????w*) return 1;; "$t"*) return 0;; esac; return 1; }
# check PATH: why PATH may not be run (nothing when it verifies).
check() { if ! ours "$1" -; then echo "it is not a file of user $u that only that user may write"; return; fi
  h=$(sum "$1") || { echo "sha256sum failed on it"; return; }; h=${h%% *}
  if [ "$h" != "$want" ]; then echo "its SHA-256 is $h, not $want (digest mismatch)"; return; fi
  [ -x "$1" ] || echo "it is not executable"; }
base=${XDG_CACHE_HOME:-}
case $base in /?*) ;; *) base=${HOME:-}
  case $base in /?*) base=$base/.cache;; *) say "neither XDG_CACHE_HOME nor HOME is an absolute path here: no private directory to push to"; exit 92;; esac;; esac
d=$base/hakaru
umask 077
mkdir -p "$d" || { say "cannot create $d"; exit 92; }
ours "$d" d || { say "$d is not a directory of user $u that only that user may write (a link, another owner, or group or world writable); not pushing there"; exit 93; }
chmod 700 "$d" || { say "cannot make $d private (chmod 700)"; exit 93; }
set -- $(ls -ldn "$base" 2>/dev/null)
case ${1:-} in d*) ;; *) say "$base is not a directory"; exit 93;; esac
case $1 in ?????w*|????????w*) say "$base is group or world writable: others could replace $d; not pushing there"; exit 93;; esac
[ "$3" = "$u" ] || [ "$3" = 0 ] || { say "$base belongs to user $3, not to $u or root: not pushing there"; exit 93; }
f=$d/$name
if [ -e "$f" ] || [ -L "$f" ]; then
  why=$(check "$f")
  if [ -z "$why" ]; then echo "reused $f"; exit 0; fi
  echo "replacing $f: $why"
  rm -f "$f" || { say "cannot remove $f, which does not verify: $why"; exit 94; }
fi
t=$d/.$name.$$
rm -f "$t"
cat > "$t" || { rm -f "$t"; say "writing $t failed"; exit 94; }
chmod 700 "$t" || { rm -f "$t"; say "chmod 700 $t failed"; exit 94; }
why=$(check "$t")
[ -z "$why" ] || { rm -f "$t"; say "the copy does not verify: $why"; exit 95; }
mv -f "$t" "$f" || { rm -f "$t"; say "cannot rename $t to $f"; exit 94; }
why=$(check "$f")
[ -z "$why" ] || { say "$f does not verify after the copy: $why"; exit 95; }
echo "pushed $f"
"#;

/// The command a push runs on the far host: the script, with the digest and version.
fn push_argv(image: &Image) -> Vec<String> {
    vec![
        "sh".to_string(),
        "-c".to_string(),
        PUSH_SCRIPT.to_string(),
        "hakaru-push".to_string(),
        image.sha256.clone(),
        env!("CARGO_PKG_VERSION").to_string(),
    ]
}

/// Copies `image` to a private directory of the remote user over the launcher's stdin (the
/// script above says how), or finds a verified copy there; returns the path to run. Nothing that did
/// not verify on the far host is ever named as the path to run.
pub fn push(
    host: &str,
    launcher: &Launcher,
    image: &Image,
    limit: Duration,
) -> Result<Pushed, String> {
    let cmd = launcher.command(&push_argv(image));
    let o = run_bounded(cmd, Some(&image.bytes), limit)
        .map_err(|e| format!("host `{host}`: cannot start {}: {e}", launcher.describe()))?;
    if o.code == Some(0) {
        let mut notes = Vec::new();
        let mut done = None;
        for line in o.stdout.lines() {
            if let Some(p) = line.strip_prefix("pushed ") {
                done = Some((p.to_string(), false));
            } else if let Some(p) = line.strip_prefix("reused ") {
                done = Some((p.to_string(), true));
            } else if let Some(r) = line.strip_prefix("replacing ") {
                notes.push(format!(
                    "host `{host}`: replaced {r}; the coordinator's binary was pushed in its place"
                ));
            }
        }
        let name = image.file_name();
        return match done {
            Some((path, reused)) if path.ends_with(&format!("/hakaru/{name}")) => Ok(Pushed {
                path,
                reused,
                notes,
            }),
            _ => Err(format!(
                "host `{host}`: pushing hakaru through {} printed no verified path (got `{}`)",
                launcher.describe(),
                last_line(&o.stdout)
            )),
        };
    }
    if o.timed_out {
        return Err(format!(
            "host `{host}`: pushing hakaru through {} took longer than {} s",
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
    let why = last_line(&o.stderr);
    Err(format!(
        "host `{host}`: pushing hakaru failed (exit {}): {}",
        o.code.map_or("none".into(), |c| c.to_string()),
        why.strip_prefix("hakaru-push: ").unwrap_or(&why)
    ))
}

// The launchers run `sh` and the push checks Unix owners and modes: Unix only.
#[cfg(all(test, unix))]
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

    /// A scratch directory removed at the end.
    struct Dir(std::path::PathBuf);

    impl Dir {
        fn new(tag: &str) -> Dir {
            let d = std::env::temp_dir().join(format!("hakaru-plan-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            Dir(d)
        }

        fn at(&self, name: &str) -> String {
            self.0.join(name).to_string_lossy().to_string()
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn chmod(path: &str, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn mode(path: &str) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    /// A launcher that runs on this machine with the cache directory at `cache`.
    fn cached_at(cache: &str) -> Launcher {
        Launcher::Exec(s(&["env", &format!("XDG_CACHE_HOME={cache}")]))
    }

    #[test]
    fn sha256_names_the_pushed_file() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let i = Image::new(b"abc".to_vec());
        assert_eq!(
            i.file_name(),
            format!("hakaru-{}-{}", env!("CARGO_PKG_VERSION"), i.sha256)
        );
    }

    #[test]
    fn version_probe_and_push_through_a_launcher() {
        let dir = Dir::new("push");
        let cache = dir.at("cache");
        let l = cached_at(&cache);
        let limit = Duration::from_secs(20);
        let image = Image::new(b"#!/bin/sh\necho 'hakaru 9.9.9'\n".to_vec());
        let p = push("h", &l, &image, limit).unwrap();
        let want = format!("{cache}/hakaru/{}", image.file_name());
        assert_eq!(p.path, want);
        assert!(!p.reused && p.notes.is_empty(), "{p:?}");
        assert_eq!(std::fs::read(&p.path).unwrap(), image.bytes);
        assert_eq!(mode(&p.path), 0o700);
        assert_eq!(mode(&format!("{cache}/hakaru")), 0o700);
        assert_eq!(
            probe_version("h", &l, &p.path, limit).unwrap(),
            "hakaru 9.9.9"
        );
        // Pushing again finds the verified copy there and copies nothing.
        let again = push("h", &l, &image, limit).unwrap();
        assert!(again.reused && again.notes.is_empty(), "{again:?}");
        let missing = dir.at("missing");
        let e = probe_version("h", &Launcher::Local, &missing, limit).unwrap_err();
        assert!(e.contains("not found") || e.contains("cannot start"), "{e}");
        let e = probe_version("h", &Launcher::Local, "/bin/true", limit).unwrap_err();
        assert!(e.contains("not a hakaru version"), "{e}");
    }

    #[test]
    fn a_file_that_does_not_verify_is_replaced_never_reused() {
        let dir = Dir::new("push-planted");
        let cache = dir.at("cache");
        let l = cached_at(&cache);
        let limit = Duration::from_secs(20);
        let image = Image::new(b"#!/bin/sh\necho 'hakaru 9.9.9'\n".to_vec());
        let path = push("h", &l, &image, limit).unwrap().path;
        // Another file under the pushed name, with the right owner and mode: its digest
        // differs, so it is replaced (and never reported as the path to run).
        let marker = dir.at("ran");
        std::fs::write(&path, format!("#!/bin/sh\ntouch {marker}\n")).unwrap();
        chmod(&path, 0o700);
        let p = push("h", &l, &image, limit).unwrap();
        assert!(!p.reused, "{p:?}");
        assert_eq!(p.notes.len(), 1, "{p:?}");
        assert!(
            p.notes[0].contains("digest mismatch") && p.notes[0].contains(&image.sha256),
            "{p:?}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), image.bytes);
        // The right bytes, but writable by others: replaced too.
        chmod(&path, 0o777);
        let p = push("h", &l, &image, limit).unwrap();
        assert!(
            !p.reused && p.notes[0].contains("only that user may write"),
            "{p:?}"
        );
        assert_eq!(mode(&path), 0o700);
        // A cache directory others may write is refused, its files unread.
        chmod(&format!("{cache}/hakaru"), 0o777);
        let e = push("h", &l, &image, limit).unwrap_err();
        assert!(e.contains("that only that user may write"), "{e}");
        // Group and world may read and enter it: made private again, and the file reused.
        chmod(&format!("{cache}/hakaru"), 0o755);
        let p = push("h", &l, &image, limit).unwrap();
        assert!(p.reused, "{p:?}");
        assert_eq!(mode(&format!("{cache}/hakaru")), 0o700);
        assert!(
            !std::path::Path::new(&marker).exists(),
            "the planted file ran"
        );
    }

    #[test]
    fn the_push_script_survives_the_ssh_launchers_quoting() {
        // sshd runs the one string it gets with the user's shell, `sh -c STRING`: so does this.
        let dir = Dir::new("push-ssh");
        let image = Image::new(b"#!/bin/sh\necho 'hakaru 9.9.9'\n".to_vec());
        let ssh = Launcher::Ssh {
            dest: "root@h".into(),
            options: Vec::new(),
        }
        .argv(&push_argv(&image));
        let remote = ssh.last().unwrap().clone();
        assert!(remote.starts_with("exec sh -c '"), "{remote}");
        let cache = dir.at("cache");
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", &remote]).env("XDG_CACHE_HOME", &cache);
        let o = run_bounded(cmd, Some(&image.bytes), Duration::from_secs(20)).unwrap();
        assert_eq!(o.code, Some(0), "{}", o.stderr);
        let path = format!("{cache}/hakaru/{}", image.file_name());
        assert_eq!(o.stdout.trim(), format!("pushed {path}"));
        assert_eq!(std::fs::read(&path).unwrap(), image.bytes);
    }

    #[test]
    fn push_refuses_directories_others_control_and_hosts_without_sha256sum() {
        let dir = Dir::new("push-refused");
        let limit = Duration::from_secs(20);
        let image = Image::new(b"#!/bin/sh\necho 'hakaru 9.9.9'\n".to_vec());
        // A cache home anyone may write: someone could swap the directory under it.
        let open = dir.at("open");
        std::fs::create_dir_all(&open).unwrap();
        chmod(&open, 0o777);
        let e = push("h", &cached_at(&open), &image, limit).unwrap_err();
        assert!(e.contains("group or world writable"), "{e}");
        // The cache directory is a link to somewhere else.
        let linked = dir.at("linked");
        std::fs::create_dir_all(&linked).unwrap();
        std::os::unix::fs::symlink(dir.at("open"), format!("{linked}/hakaru")).unwrap();
        let e = push("h", &cached_at(&linked), &image, limit).unwrap_err();
        assert!(e.contains("not a directory of user"), "{e}");
        // No sha256sum nor shasum there: refused by name. PATH holds every other tool the
        // script uses.
        let bin = dir.at("bin");
        std::fs::create_dir_all(&bin).unwrap();
        for tool in ["sh", "id", "ls", "mkdir", "chmod", "rm", "cat", "mv"] {
            let o = std::process::Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .unwrap();
            let real = String::from_utf8_lossy(&o.stdout).trim().to_string();
            std::os::unix::fs::symlink(real, format!("{bin}/{tool}")).unwrap();
        }
        let l = Launcher::Exec(s(&[
            "env",
            &format!("PATH={bin}"),
            &format!("XDG_CACHE_HOME={}", dir.at("cache")),
        ]));
        let e = push("h", &l, &image, limit).unwrap_err();
        assert!(e.contains("no sha256sum"), "{e}");
    }
}
