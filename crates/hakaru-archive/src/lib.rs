//! hakaru's results archive: every run saved with `--save` is one row of a SQLite database
//! holding the full JSON result and the columns that lists, filters and trends need (time,
//! kind, peer, direction, flows, headline and unit, labels, command line, hakaru version).
//!
//! One file, no server: SQLite in WAL mode with a busy timeout, so runs saving at the same
//! moment all land and readers never block writers. The schema is versioned (`schema.rs`);
//! opening an older database upgrades it in place, and a newer one is refused by name.
//!
//! This crate stores and finds rows; it does not know what a result means. The caller
//! (the CLI, through `hakaru_report::summary`) fills the columns from the result.

mod schema;
mod when;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params_from_iter, Connection, ErrorCode, OptionalExtension};

pub use schema::CURRENT as SCHEMA_VERSION;
pub use when::parse_when;

/// How long a save waits for another process's write to finish before it gives up.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(20);

/// What can go wrong with the archive; each message names the file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No archive at this path yet (lists and lookups do not create one).
    #[error("no runs saved yet: {0} does not exist (save runs with --save)")]
    Missing(PathBuf),
    /// The directory or file could not be made or opened.
    #[error("cannot open the archive {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is not a SQLite database (or its header is damaged).
    #[error("{0} is not a hakaru archive: the file is not a SQLite database (corrupt, or another kind of file)")]
    NotADatabase(PathBuf),
    /// SQLite found damage inside the database.
    #[error(
        "the archive {0} is damaged (SQLite reports corruption); move it aside to start a new one"
    )]
    Corrupt(PathBuf),
    /// Another process held the database for longer than the busy timeout.
    #[error("the archive {path} is locked by another process (waited {waited:?})")]
    Locked { path: PathBuf, waited: Duration },
    /// A database written by a newer hakaru.
    #[error("the archive {path} has schema version {found}; this hakaru reads up to {reads} (a newer hakaru wrote it)")]
    Newer {
        path: PathBuf,
        found: u32,
        reads: u32,
    },
    /// A run id that names no run.
    #[error("no run {0} in the archive {1}")]
    NoSuchRun(String, PathBuf),
    /// A run reference that is neither a number nor `latest`/`latest~N`.
    #[error("'{0}' is not a run id (a number, latest, or latest~N)")]
    BadRef(String),
    /// Anything else SQLite reported.
    #[error("the archive {path}: {source}")]
    Sql {
        path: PathBuf,
        source: rusqlite::Error,
    },
}

/// A run to save.
#[derive(Debug, Clone, Default)]
pub struct NewRun {
    /// When the test started, Unix seconds.
    pub started_at: f64,
    /// The command line that ran it.
    pub command: String,
    /// Test kind: tcp, udp, pps, latency, connect, quick, http, plan, find-max...
    pub kind: String,
    /// The server or peer (`host:port`, a URL, a plan file).
    pub peer: String,
    /// up, down, bidir, or empty.
    pub direction: String,
    /// Flows (connections) per direction, when the kind has them.
    pub flows: Option<u32>,
    /// The headline figure, in `unit`.
    pub headline: Option<f64>,
    /// Unit of the headline (bit/s, datagrams/s, us, connections/s).
    pub unit: String,
    /// `--label key=value` pairs.
    pub labels: Vec<(String, String)>,
    /// hakaru version that ran it.
    pub version: String,
    /// The full JSON result document.
    pub result: String,
}

/// A saved run as lists show it (the result document is fetched by [`Archive::result`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub id: i64,
    pub started_at: f64,
    pub saved_at: f64,
    pub command: String,
    pub kind: String,
    pub peer: String,
    pub direction: String,
    pub flows: Option<u32>,
    pub headline: Option<f64>,
    pub unit: String,
    pub labels: Vec<(String, String)>,
    pub version: String,
}

/// Which runs a list shows.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this kind.
    pub kind: Option<String>,
    /// Only this peer: `host` matches `host:port` and `[host]:port` too.
    pub peer: Option<String>,
    /// Only runs carrying all these labels.
    pub labels: Vec<(String, String)>,
    /// Only runs started at or after this time (Unix seconds).
    pub since: Option<f64>,
    /// Only runs started before this time.
    pub before: Option<f64>,
    /// At most this many (the most recent ones).
    pub limit: Option<usize>,
}

/// The pause before opening again after SQLite said "busy" without waiting ([`Archive::open`]).
const OPEN_RETRY: Duration = Duration::from_millis(20);

/// An open archive.
pub struct Archive {
    conn: Connection,
    path: PathBuf,
    timeout: Duration,
}

const RUN_COLUMNS: &str = "id, started_at, saved_at, command, kind, peer, direction, flows, \
                           headline, unit, version";

impl Archive {
    /// Opens the archive at `path`, creating it (and its directory) if needed, and upgrades
    /// an older schema.
    pub fn open(path: &Path) -> Result<Archive, Error> {
        Self::open_waiting(path, BUSY_TIMEOUT)
    }

    /// As [`Archive::open`], waiting at most `timeout` for another process's write.
    pub fn open_waiting(path: &Path, timeout: Duration) -> Result<Archive, Error> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| Error::Open {
                path: path.to_path_buf(),
                source,
            })?;
        }
        Self::open_file(path, timeout)
    }

    /// Opens an archive that must exist already (for lists and lookups).
    pub fn open_existing(path: &Path) -> Result<Archive, Error> {
        if !path.exists() {
            return Err(Error::Missing(path.to_path_buf()));
        }
        Self::open_file(path, BUSY_TIMEOUT)
    }

    /// Opens (creating, switching to WAL and migrating as needed) within `timeout`. SQLite
    /// answers "busy" at once, without waiting, where waiting could deadlock: several processes
    /// opening a new file together each read it and then want it alone to switch its journal
    /// mode. Opening again after a short pause settles that (one of them wins the switch).
    fn open_file(path: &Path, timeout: Duration) -> Result<Archive, Error> {
        let start = std::time::Instant::now();
        loop {
            match Self::open_once(path, timeout) {
                Err(Error::Locked { .. }) if start.elapsed() < timeout => {
                    std::thread::sleep(OPEN_RETRY.min(timeout.saturating_sub(start.elapsed())));
                }
                r => return r,
            }
        }
    }

    fn open_once(path: &Path, timeout: Duration) -> Result<Archive, Error> {
        let conn = Connection::open(path).map_err(|e| classify(path, e, timeout))?;
        let mut a = Archive {
            conn,
            path: path.to_path_buf(),
            timeout,
        };
        a.conn
            .busy_timeout(timeout)
            .map_err(|e| classify(path, e, timeout))?;
        // The first statement that reads the file tells a damaged or foreign file apart.
        let mode: String = a
            .conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(|e| a.err(e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            // WAL needs shared memory beside the file; where it cannot be had (some network
            // file systems) SQLite stays in its rollback journal: slower, still correct.
            tracing::warn!(
                "the archive {} runs in journal mode {mode} (WAL was refused); saving still works",
                path.display()
            );
        }
        a.conn
            .execute_batch("PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL;")
            .map_err(|e| a.err(e))?;
        a.migrate()?;
        Ok(a)
    }

    /// The file this archive is in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version the database is at.
    pub fn schema_version(&self) -> Result<u32, Error> {
        self.conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| self.err(e))
    }

    fn err(&self, e: rusqlite::Error) -> Error {
        classify(&self.path, e, self.timeout)
    }

    /// Runs the migrations above the database's version, in one write transaction so two
    /// processes opening an old database at once upgrade it once.
    fn migrate(&mut self) -> Result<(), Error> {
        let found = self.schema_version()?;
        if found > SCHEMA_VERSION {
            return Err(self.newer(found));
        }
        if found == SCHEMA_VERSION {
            return Ok(());
        }
        let path = self.path.clone();
        let t = self.timeout;
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| classify(&path, e, t))?;
        // Read again under the write lock: another process may have upgraded meanwhile.
        let at: u32 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| classify(&path, e, t))?;
        if at > SCHEMA_VERSION {
            return Err(Error::Newer {
                path,
                found: at,
                reads: SCHEMA_VERSION,
            });
        }
        for (i, sql) in schema::MIGRATIONS.iter().enumerate().skip(at as usize) {
            tx.execute_batch(sql).map_err(|e| classify(&path, e, t))?;
            tx.pragma_update(None, "user_version", i as u32 + 1)
                .map_err(|e| classify(&path, e, t))?;
        }
        tx.commit().map_err(|e| classify(&path, e, t))
    }

    fn newer(&self, found: u32) -> Error {
        Error::Newer {
            path: self.path.clone(),
            found,
            reads: SCHEMA_VERSION,
        }
    }

    /// Saves a run; returns its id.
    pub fn save(&mut self, run: &NewRun) -> Result<i64, Error> {
        let path = self.path.clone();
        let t = self.timeout;
        let e = |e| classify(&path, e, t);
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(e)?;
        tx.execute(
            "INSERT INTO runs (saved_at, started_at, command, kind, peer, direction, flows, \
             headline, unit, version, result) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            rusqlite::params![
                now(),
                run.started_at,
                run.command,
                run.kind,
                run.peer,
                run.direction,
                run.flows,
                run.headline.filter(|v| v.is_finite()),
                run.unit,
                run.version,
                run.result,
            ],
        )
        .map_err(e)?;
        let id = tx.last_insert_rowid();
        for (k, v) in &run.labels {
            tx.execute(
                "INSERT OR REPLACE INTO labels (run_id, key, value) VALUES (?1, ?2, ?3)",
                rusqlite::params![id, k, v],
            )
            .map_err(e)?;
        }
        tx.commit().map_err(e)?;
        Ok(id)
    }

    /// Runs matching `f`, the most recent first.
    pub fn list(&self, f: &Filter) -> Result<Vec<Run>, Error> {
        let mut sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE 1");
        let mut args: Vec<rusqlite::types::Value> = Vec::new();
        let mut arg = |sql: &mut String, clause: &str, v: rusqlite::types::Value| {
            args.push(v);
            sql.push_str(&clause.replace('?', &format!("?{}", args.len())));
        };
        if let Some(k) = &f.kind {
            arg(&mut sql, " AND kind = ?", k.clone().into());
        }
        if let Some(p) = &f.peer {
            arg(&mut sql, " AND (peer = ?", p.clone().into());
            arg(
                &mut sql,
                " OR substr(peer, 1, length(?)) = ?",
                format!("{p}:").into(),
            );
            arg(
                &mut sql,
                " OR substr(peer, 1, length(?)) = ?)",
                format!("[{p}]:").into(),
            );
        }
        for (k, v) in &f.labels {
            arg(
                &mut sql,
                " AND EXISTS (SELECT 1 FROM labels l WHERE l.run_id = runs.id AND l.key = ?",
                k.clone().into(),
            );
            arg(&mut sql, " AND l.value = ?)", v.clone().into());
        }
        if let Some(t) = f.since {
            arg(&mut sql, " AND started_at >= ?", t.into());
        }
        if let Some(t) = f.before {
            arg(&mut sql, " AND started_at < ?", t.into());
        }
        sql.push_str(" ORDER BY started_at DESC, id DESC");
        if let Some(n) = f.limit {
            arg(
                &mut sql,
                " LIMIT ?",
                (n.min(i64::MAX as usize) as i64).into(),
            );
        }
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params_from_iter(args.iter()), row_to_run)
            .map_err(|e| self.err(e))?
            .collect::<Result<Vec<Run>, _>>()
            .map_err(|e| self.err(e))?;
        rows.into_iter().map(|r| self.with_labels(r)).collect()
    }

    fn with_labels(&self, mut r: Run) -> Result<Run, Error> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT key, value FROM labels WHERE run_id = ?1 ORDER BY key")
            .map_err(|e| self.err(e))?;
        r.labels = stmt
            .query_map([r.id], |row| Ok((row.get(0)?, row.get(1)?)))
            .map_err(|e| self.err(e))?
            .collect::<Result<_, _>>()
            .map_err(|e| self.err(e))?;
        Ok(r)
    }

    /// The run a reference names: an id, `latest` (the last saved) or `latest~N` (N before it).
    pub fn resolve(&self, reference: &str) -> Result<i64, Error> {
        let r = reference.trim();
        let back = if r == "latest" {
            Some(0)
        } else if let Some(n) = r.strip_prefix("latest~") {
            Some(
                n.parse::<i64>()
                    .map_err(|_| Error::BadRef(reference.to_string()))?,
            )
        } else {
            None
        };
        let id = match back {
            Some(n) => self
                .conn
                .query_row(
                    "SELECT id FROM runs ORDER BY id DESC LIMIT 1 OFFSET ?1",
                    [n],
                    |row| row.get(0),
                )
                .optional()
                .map_err(|e| self.err(e))?,
            None => {
                let id: i64 = r
                    .parse()
                    .map_err(|_| Error::BadRef(reference.to_string()))?;
                self.conn
                    .query_row("SELECT id FROM runs WHERE id = ?1", [id], |row| row.get(0))
                    .optional()
                    .map_err(|e| self.err(e))?
            }
        };
        id.ok_or_else(|| Error::NoSuchRun(reference.to_string(), self.path.clone()))
    }

    /// One run and its stored result document.
    pub fn get(&self, id: i64) -> Result<(Run, String), Error> {
        let found = self
            .conn
            .query_row(
                &format!("SELECT {RUN_COLUMNS}, result FROM runs WHERE id = ?1"),
                [id],
                |row| Ok((row_to_run(row)?, row.get::<_, String>(11)?)),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        let (run, doc) =
            found.ok_or_else(|| Error::NoSuchRun(id.to_string(), self.path.clone()))?;
        Ok((self.with_labels(run)?, doc))
    }

    /// Deletes these runs; returns how many there were.
    pub fn remove(&mut self, ids: &[i64]) -> Result<usize, Error> {
        let path = self.path.clone();
        let t = self.timeout;
        let tx = self.conn.transaction().map_err(|e| classify(&path, e, t))?;
        let mut n = 0;
        for id in ids {
            tx.execute("DELETE FROM labels WHERE run_id = ?1", [id])
                .map_err(|e| classify(&path, e, t))?;
            n += tx
                .execute("DELETE FROM runs WHERE id = ?1", [id])
                .map_err(|e| classify(&path, e, t))?;
        }
        tx.commit().map_err(|e| classify(&path, e, t))?;
        Ok(n)
    }

    /// Deletes the runs started before `t` (Unix seconds); returns how many.
    pub fn remove_before(&mut self, before: f64) -> Result<usize, Error> {
        let path = self.path.clone();
        let t = self.timeout;
        let tx = self.conn.transaction().map_err(|e| classify(&path, e, t))?;
        tx.execute(
            "DELETE FROM labels WHERE run_id IN (SELECT id FROM runs WHERE started_at < ?1)",
            [before],
        )
        .map_err(|e| classify(&path, e, t))?;
        let n = tx
            .execute("DELETE FROM runs WHERE started_at < ?1", [before])
            .map_err(|e| classify(&path, e, t))?;
        tx.commit().map_err(|e| classify(&path, e, t))?;
        Ok(n)
    }
}

fn row_to_run(row: &rusqlite::Row<'_>) -> rusqlite::Result<Run> {
    Ok(Run {
        id: row.get(0)?,
        started_at: row.get(1)?,
        saved_at: row.get(2)?,
        command: row.get(3)?,
        kind: row.get(4)?,
        peer: row.get(5)?,
        direction: row.get(6)?,
        flows: row.get(7)?,
        headline: row.get(8)?,
        unit: row.get(9)?,
        version: row.get(10)?,
        labels: Vec::new(),
    })
}

/// Names the SQLite failures a user can act on.
fn classify(path: &Path, e: rusqlite::Error, waited: Duration) -> Error {
    let path = path.to_path_buf();
    if let rusqlite::Error::SqliteFailure(f, _) = &e {
        match f.code {
            ErrorCode::NotADatabase => return Error::NotADatabase(path),
            ErrorCode::DatabaseCorrupt => return Error::Corrupt(path),
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => {
                return Error::Locked { path, waited }
            }
            ErrorCode::CannotOpen => {
                return Error::Open {
                    path,
                    source: std::io::Error::other(e.to_string()),
                }
            }
            _ => {}
        }
    }
    Error::Sql { path, source: e }
}

/// The present, Unix seconds.
pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The default archive path: `$XDG_DATA_HOME/hakaru/results.db`, else
/// `$HOME/.local/share/hakaru/results.db`, else `hakaru-results.db` here.
pub fn default_path() -> PathBuf {
    let xdg = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty());
    let home = std::env::var_os("HOME").filter(|v| !v.is_empty());
    match (xdg, home) {
        (Some(x), _) if Path::new(&x).is_absolute() => PathBuf::from(x).join("hakaru/results.db"),
        (_, Some(h)) => PathBuf::from(h).join(".local/share/hakaru/results.db"),
        _ => PathBuf::from("hakaru-results.db"),
    }
}

#[cfg(test)]
mod tests;
