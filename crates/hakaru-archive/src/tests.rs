use super::*;

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hakaru-archive-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("results.db")
}

fn run(kind: &str, peer: &str, started: f64, headline: f64) -> NewRun {
    NewRun {
        started_at: started,
        command: format!("hakaru {kind} {peer}"),
        kind: kind.into(),
        peer: peer.into(),
        direction: "up".into(),
        flows: Some(4),
        headline: Some(headline),
        unit: "bit/s".into(),
        labels: vec![],
        version: "0.1.0".into(),
        result: format!("{{\"test\":\"{kind}\",\"headline\":{headline}}}"),
    }
}

#[test]
fn saves_lists_and_filters() {
    let path = temp("list");
    let mut a = Archive::open(&path).unwrap();
    assert_eq!(a.schema_version().unwrap(), SCHEMA_VERSION);
    let id1 = a.save(&run("tcp", "10.0.0.2:5201", 100.0, 1e9)).unwrap();
    let mut r2 = run("pps", "[fd00::2]:5201", 200.0, 2e6);
    r2.labels = vec![
        ("kernel".into(), "6.1".into()),
        ("nic".into(), "ena".into()),
    ];
    let id2 = a.save(&r2).unwrap();
    let id3 = a.save(&run("tcp", "10.0.0.20:5201", 300.0, 3e9)).unwrap();
    assert!(id1 < id2 && id2 < id3);

    let all = a.list(&Filter::default()).unwrap();
    assert_eq!(
        all.iter().map(|r| r.id).collect::<Vec<_>>(),
        [id3, id2, id1]
    );
    let tcp = a
        .list(&Filter {
            kind: Some("tcp".into()),
            ..Filter::default()
        })
        .unwrap();
    assert_eq!(tcp.len(), 2);
    // A host matches its host:port, not a longer address that starts the same way.
    let host = a
        .list(&Filter {
            peer: Some("10.0.0.2".into()),
            ..Filter::default()
        })
        .unwrap();
    assert_eq!(host.iter().map(|r| r.id).collect::<Vec<_>>(), [id1]);
    let v6 = a
        .list(&Filter {
            peer: Some("fd00::2".into()),
            ..Filter::default()
        })
        .unwrap();
    assert_eq!(v6.iter().map(|r| r.id).collect::<Vec<_>>(), [id2]);
    let lab = a
        .list(&Filter {
            labels: vec![("nic".into(), "ena".into())],
            ..Filter::default()
        })
        .unwrap();
    assert_eq!(lab.len(), 1);
    assert_eq!(lab[0].labels, r2.labels);
    let none = a
        .list(&Filter {
            labels: vec![("nic".into(), "mlx5".into())],
            ..Filter::default()
        })
        .unwrap();
    assert!(none.is_empty());
    let since = a
        .list(&Filter {
            since: Some(150.0),
            limit: Some(1),
            ..Filter::default()
        })
        .unwrap();
    assert_eq!(since.iter().map(|r| r.id).collect::<Vec<_>>(), [id3]);

    let (got, doc) = a.get(id2).unwrap();
    assert_eq!(got.kind, "pps");
    assert_eq!(got.flows, Some(4));
    assert_eq!(got.headline, Some(2e6));
    assert!(doc.contains("\"pps\""));
}

#[test]
fn references_resolve() {
    let path = temp("refs");
    let mut a = Archive::open(&path).unwrap();
    assert!(matches!(a.resolve("latest"), Err(Error::NoSuchRun(..))));
    let ids: Vec<i64> = (0..3)
        .map(|i| a.save(&run("tcp", "h:1", f64::from(i), 1.0)).unwrap())
        .collect();
    assert_eq!(a.resolve("latest").unwrap(), ids[2]);
    assert_eq!(a.resolve("latest~1").unwrap(), ids[1]);
    assert_eq!(a.resolve("latest~2").unwrap(), ids[0]);
    assert!(matches!(a.resolve("latest~3"), Err(Error::NoSuchRun(..))));
    assert_eq!(a.resolve(&ids[1].to_string()).unwrap(), ids[1]);
    assert!(matches!(a.resolve("999"), Err(Error::NoSuchRun(..))));
    for bad in ["last", "latest~x", "1.5", ""] {
        assert!(matches!(a.resolve(bad), Err(Error::BadRef(_))), "{bad}");
    }
}

#[test]
fn removes_by_id_and_age() {
    let path = temp("rm");
    let mut a = Archive::open(&path).unwrap();
    let mut r = run("tcp", "h:1", 10.0, 1.0);
    r.labels = vec![("k".into(), "v".into())];
    let old = a.save(&r).unwrap();
    let mid = a.save(&run("tcp", "h:1", 20.0, 1.0)).unwrap();
    let new = a.save(&run("tcp", "h:1", 30.0, 1.0)).unwrap();
    assert_eq!(a.remove(&[mid, 12345]).unwrap(), 1);
    assert_eq!(a.remove_before(25.0).unwrap(), 1);
    let left = a.list(&Filter::default()).unwrap();
    assert_eq!(left.iter().map(|r| r.id).collect::<Vec<_>>(), [new]);
    let orphans: i64 = a
        .conn
        .query_row(
            "SELECT count(*) FROM labels WHERE run_id = ?1",
            [old],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(orphans, 0);
}

#[test]
fn a_version_1_database_is_upgraded_with_its_rows() {
    let path = temp("v1");
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch(schema::MIGRATIONS[0]).unwrap();
        c.pragma_update(None, "user_version", 1).unwrap();
        c.execute(
            "INSERT INTO runs (saved_at, kind, peer, headline, unit, version, result) \
             VALUES (500.0, 'tcp', 'h:5201', 9.5e9, 'bit/s', '0.0.9', ?1)",
            [r#"{"test":"tcp","started_at_unix":490.25,"spec":{"kind":"tcp","flows":8,"direction":"reverse"}}"#],
        )
        .unwrap();
        c.execute(
            "INSERT INTO runs (saved_at, kind, peer, headline, unit, version, result) \
             VALUES (600.0, 'quick', 'h:5201', NULL, '', '0.0.9', '{\"test\":\"quick\"}')",
            [],
        )
        .unwrap();
    }
    let a = Archive::open(&path).unwrap();
    assert_eq!(a.schema_version().unwrap(), SCHEMA_VERSION);
    let rows = a.list(&Filter::default()).unwrap();
    assert_eq!(rows.len(), 2);
    let tcp = rows.iter().find(|r| r.kind == "tcp").unwrap();
    assert_eq!(tcp.started_at, 490.25);
    assert_eq!(tcp.direction, "down");
    assert_eq!(tcp.flows, Some(8));
    let quick = rows.iter().find(|r| r.kind == "quick").unwrap();
    assert_eq!(
        quick.started_at, 600.0,
        "no start time in the document: the save time"
    );
    assert_eq!(quick.headline, None);
}

#[test]
fn a_newer_database_is_refused_by_name() {
    let path = temp("newer");
    {
        let c = Connection::open(&path).unwrap();
        c.pragma_update(None, "user_version", SCHEMA_VERSION + 5)
            .unwrap();
    }
    let e = Archive::open(&path).err().unwrap();
    assert!(
        matches!(e, Error::Newer { found, .. } if found == SCHEMA_VERSION + 5),
        "{e}"
    );
    assert!(e.to_string().contains("newer hakaru"), "{e}");
}

#[test]
fn a_file_that_is_no_database_is_named() {
    let path = temp("garbage");
    std::fs::write(&path, vec![0x5a_u8; 8192]).unwrap();
    let e = Archive::open(&path).err().unwrap();
    assert!(matches!(e, Error::NotADatabase(_)), "{e}");
    assert!(e.to_string().contains("not a SQLite database"), "{e}");
}

#[test]
fn a_held_write_lock_is_reported_after_the_timeout() {
    let path = temp("locked");
    let mut a = Archive::open(&path).unwrap();
    let other = Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let mut short = Archive::open_waiting(&path, Duration::from_millis(200)).unwrap();
    let e = short.save(&run("tcp", "h:1", 1.0, 1.0)).err().unwrap();
    assert!(matches!(e, Error::Locked { .. }), "{e}");
    assert!(e.to_string().contains("locked by another process"), "{e}");
    other.execute_batch("COMMIT").unwrap();
    a.save(&run("tcp", "h:1", 1.0, 1.0)).unwrap();
}

#[test]
fn concurrent_writers_all_land() {
    let path = temp("concurrent");
    Archive::open(&path).unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let path = &path;
            s.spawn(move || {
                let mut a = Archive::open(path).unwrap();
                for i in 0..25 {
                    a.save(&run("udp", "h:1", f64::from(t * 100 + i), 1.0))
                        .unwrap();
                }
            });
        }
    });
    let a = Archive::open(&path).unwrap();
    assert_eq!(a.list(&Filter::default()).unwrap().len(), 100);
}

#[test]
fn lookups_do_not_create_an_archive() {
    let path = temp("missing").with_file_name("absent.db");
    assert!(matches!(
        Archive::open_existing(&path),
        Err(Error::Missing(_))
    ));
    assert!(!path.exists());
}
