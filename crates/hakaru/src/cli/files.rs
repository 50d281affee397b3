//! Writing files the command line was asked for.

/// Writes `bytes` to a temporary file beside `path` and renames it into place, so a failed
/// write leaves no partial file behind.
pub fn write_whole(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let tmp = dir
        .map(|d| d.to_path_buf())
        .unwrap_or_default()
        .join(format!(".{name}.{}.tmp", std::process::id()));
    let res = std::fs::write(&tmp, bytes).and_then(|_| std::fs::rename(&tmp, path));
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}
