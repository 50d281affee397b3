//! Every relative link in README.md and docs/**/*.md points at a file that exists, and a
//! `#anchor` at a heading of that file (GitHub's heading ids), so the manual moved out of the
//! README (issue 34) cannot rot unseen.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and every Markdown file under docs/.
fn markdown_files() -> Vec<PathBuf> {
    let mut out = vec![repo().join("README.md")];
    let mut dirs = vec![repo().join("docs")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("docs dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The lines of a Markdown file outside fenced code blocks, with their numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fence = false;
    let mut out = Vec::new();
    for (n, l) in text.lines().enumerate() {
        if l.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if !fence {
            out.push((n + 1, l));
        }
    }
    out
}

/// `line` without its inline code spans.
fn without_code(line: &str) -> String {
    let mut out = String::new();
    for (i, part) in line.split('`').enumerate() {
        if i % 2 == 0 {
            out.push_str(part);
        }
    }
    out
}

/// The targets of the inline links and images of a line: `[text](target)`.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code(line);
    let mut out = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end].split_whitespace().next().unwrap_or("");
        out.push(target.to_string());
        rest = &after[end..];
    }
    out
}

/// GitHub's id for a heading: lower case, punctuation dropped, spaces as hyphens.
fn slug(heading: &str) -> String {
    // Link text stays, its target goes.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(at) = rest.find("](") {
        text.push_str(&rest[..at]);
        rest = rest[at..].find(')').map_or("", |e| &rest[at + e + 1..]);
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The heading ids of a Markdown file, with GitHub's `-1`, `-2` for repeats.
fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for (_, l) in prose(text) {
        let t = l.trim_start();
        let hashes = t.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !t[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&t[hashes..]);
        let n = seen.entry(base.clone()).or_insert(0);
        out.push(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

#[test]
fn slugs_follow_github() {
    assert_eq!(
        slug(" Finding the limit: `--find-max`"),
        "finding-the-limit---find-max"
    );
    assert_eq!(
        slug(" Many senders into one receiver (the seeds' \"3 machines × 64 flows\")"),
        "many-senders-into-one-receiver-the-seeds-3-machines--64-flows"
    );
    assert_eq!(slug(" See [Push](#push) now"), "see-push-now");
    assert_eq!(anchors("# A\n## A\n```\n# not\n```\n"), ["a", "a-1"]);
    assert_eq!(
        link_targets("a [x](y.md#z) `[no](n.md)` ![i](img.png \"t\")"),
        ["y.md#z", "img.png"]
    );
}

#[test]
fn doc_links_point_at_files_and_headings_that_exist() {
    let mut bad = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).expect("read markdown");
        let dir = file.parent().expect("a directory");
        for (n, line) in prose(&text) {
            for target in link_targets(line) {
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let at = format!("{}:{n}: {target}", file.display());
                let dest = if path.is_empty() {
                    file.clone()
                } else {
                    dir.join(path)
                };
                if !dest.exists() {
                    bad.push(format!("{at}: no such file"));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                if dest.extension().is_some_and(|x| x == "md") {
                    let body = std::fs::read_to_string(&dest).expect("read link target");
                    if !anchors(&body).iter().any(|a| a == anchor) {
                        bad.push(format!("{at}: no heading with that id"));
                    }
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the parser right?"
    );
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
}
