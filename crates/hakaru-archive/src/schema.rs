//! The archive's schema, one migration per version. `PRAGMA user_version` holds the version a
//! database is at; opening runs the migrations above it, each in its own transaction, so a
//! database is always at exactly one version. A migration is never edited once released:
//! changes are a new entry at the end.

/// Migration `i` takes a database from version `i` to version `i + 1`.
pub const MIGRATIONS: &[&str] = &[
    // 1: the first archive: one row per run, the result document and what lists need.
    "CREATE TABLE runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        saved_at REAL NOT NULL,
        kind TEXT NOT NULL,
        peer TEXT NOT NULL,
        headline REAL,
        unit TEXT NOT NULL,
        version TEXT NOT NULL,
        result TEXT NOT NULL
    );
    CREATE INDEX runs_kind ON runs (kind, saved_at);",
    // 2: the run's own start time (lists and trends order by when a test ran, not when it was
    // saved), its command line, direction and flow count, and labels. Rows saved by version 1
    // get their start time, direction and flows from the stored document.
    "ALTER TABLE runs ADD COLUMN started_at REAL;
    ALTER TABLE runs ADD COLUMN command TEXT NOT NULL DEFAULT '';
    ALTER TABLE runs ADD COLUMN direction TEXT NOT NULL DEFAULT '';
    ALTER TABLE runs ADD COLUMN flows INTEGER;
    UPDATE runs SET
        started_at = coalesce(json_extract(result, '$.started_at_unix'), saved_at),
        direction = CASE json_extract(result, '$.spec.direction')
            WHEN 'forward' THEN 'up' WHEN 'reverse' THEN 'down' WHEN 'bidir' THEN 'bidir'
            ELSE '' END,
        flows = json_extract(result, '$.spec.flows')
        WHERE json_valid(result);
    UPDATE runs SET started_at = saved_at WHERE started_at IS NULL;
    CREATE TABLE labels (
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (run_id, key)
    );
    CREATE INDEX labels_key_value ON labels (key, value);
    DROP INDEX runs_kind;
    CREATE INDEX runs_kind_started ON runs (kind, started_at);
    CREATE INDEX runs_peer ON runs (peer);
    CREATE INDEX runs_started ON runs (started_at);",
];

/// The version a database is at after every migration.
pub const CURRENT: u32 = MIGRATIONS.len() as u32;
