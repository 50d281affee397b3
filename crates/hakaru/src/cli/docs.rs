//! `hakaru completions SHELL` and `hakaru man`: generated from the same command definition
//! the parser uses, so they never drift from the flags.

use std::path::PathBuf;

use anyhow::Context;

/// Options of `hakaru completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionArgs {
    /// The shell to complete for. Install, for example:
    /// bash: `hakaru completions bash > /etc/bash_completion.d/hakaru`;
    /// zsh: `hakaru completions zsh > "${fpath[1]}/_hakaru"`;
    /// fish: `hakaru completions fish > ~/.config/fish/completions/hakaru.fish`.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// Options of `hakaru man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write hakaru.1 and one hakaru-SUBCOMMAND.1 per subcommand into this directory
    /// (install: `hakaru man -o /usr/local/share/man/man1`) instead of printing hakaru.1.
    #[arg(short, long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
}

/// Prints the completion script.
pub fn completions(a: CompletionArgs) -> anyhow::Result<()> {
    let mut cmd = super::command();
    let mut buf = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "hakaru", &mut buf);
    crate::output::out(&String::from_utf8_lossy(&buf));
    Ok(())
}

/// Prints the man page, or writes every page into a directory.
pub fn man(a: ManArgs) -> anyhow::Result<()> {
    let cmd = super::command();
    let Some(dir) = a.out_dir else {
        let mut buf = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut buf)?;
        crate::output::out(&String::from_utf8_lossy(&buf));
        return Ok(());
    };
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("-o/--out-dir {}: cannot create it", dir.display()))?;
    let mut written = Vec::new();
    let mut pages = vec![(String::from("hakaru"), cmd.clone())];
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = format!("hakaru-{}", sub.get_name());
        pages.push((name.clone(), sub.clone().name(name)));
    }
    for (name, page) in pages {
        let path = dir.join(format!("{name}.1"));
        let mut buf = Vec::new();
        clap_mangen::Man::new(page).render(&mut buf)?;
        std::fs::write(&path, buf).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    eprintln!(
        "hakaru: wrote {} man pages into {}",
        written.len(),
        dir.display()
    );
    Ok(())
}
