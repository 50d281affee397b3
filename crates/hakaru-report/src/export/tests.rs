use super::*;
use hakaru_model::UdpSpec;

const ALL_KINDS: [DocKind; 15] = [
    DocKind::Run(RunKind::TCP),
    DocKind::Run(RunKind::UDP),
    DocKind::Run(RunKind::PPS),
    DocKind::Run(RunKind::LATENCY),
    DocKind::Run(RunKind::CONNECT),
    DocKind::Run(RunKind::HTTP),
    DocKind::Run(RunKind::RAW),
    DocKind::Runs,
    DocKind::FindMax,
    DocKind::Quick,
    DocKind::Plan,
    DocKind::Nic,
    DocKind::History,
    DocKind::Trend,
    DocKind::Compare,
];

fn names(doc: DocKind) -> Vec<&'static str> {
    formats_for(doc).iter().map(|f| f.name()).collect()
}

/// A real two-flow TCP result (the fixture `compare`'s tests read too).
fn tcp_result() -> RunResult {
    let text = std::fs::read_to_string(format!(
        "{}/tests/fixtures/hakaru/tcp_p2_omit1.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("fixture");
    serde_json::from_str(&text).expect("fixture parses")
}

#[test]
fn every_format_parses_from_its_name_and_names_are_unique() {
    let mut seen = std::collections::BTreeSet::new();
    for e in EXPORTERS {
        let f = Format::named(e.name()).unwrap_or_else(|| panic!("{}", e.name()));
        assert_eq!(f.name(), e.name());
        assert!(seen.insert(e.name()), "{} twice", e.name());
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        [
            "csv",
            "csv-summary",
            "iperf3-json",
            "json",
            "json-stream",
            "markdown",
            "text"
        ]
    );
    assert!(Format::named("xml").is_none());
    assert!(Format::named("JSON").is_none());
    assert_eq!(Format::text().name(), "text");
    assert_eq!(Format::json().name(), "json");
    assert_eq!(Format::json_stream().name(), "json-stream");
}

#[test]
fn every_format_writes_some_document_and_has_help_for_it() {
    for e in EXPORTERS {
        let docs: Vec<DocKind> = ALL_KINDS.into_iter().filter(|d| e.supports(*d)).collect();
        assert!(!docs.is_empty(), "{} writes nothing", e.name());
        for d in docs {
            let h = e.help(d);
            assert!(
                !h.is_empty() && !h.ends_with('.'),
                "{} {d:?}: {h:?}",
                e.name()
            );
        }
    }
}

#[test]
fn the_formats_of_each_document_are_todays() {
    let all = [
        "text",
        "json",
        "json-stream",
        "iperf3-json",
        "csv",
        "csv-summary",
    ];
    for k in [RunKind::TCP, RunKind::UDP, RunKind::PPS] {
        assert_eq!(names(DocKind::Run(k)), all, "{k:?}");
    }
    let no_iperf3 = ["text", "json", "json-stream", "csv", "csv-summary"];
    for k in [RunKind::LATENCY, RunKind::CONNECT, RunKind::HTTP] {
        assert_eq!(names(DocKind::Run(k)), no_iperf3, "{k:?}");
    }
    let three = ["text", "json", "json-stream"];
    for d in [
        DocKind::Run(RunKind::RAW),
        DocKind::FindMax,
        DocKind::Quick,
        DocKind::Plan,
        DocKind::Nic,
    ] {
        assert_eq!(names(d), three, "{d:?}");
    }
    assert_eq!(names(DocKind::History), ["text", "json", "csv"]);
    assert_eq!(names(DocKind::Trend), ["text", "json", "csv"]);
    assert_eq!(names(DocKind::Compare), ["text", "json", "markdown"]);
    assert_eq!(names(DocKind::Runs), ["json"]);
}

#[test]
fn an_unsupported_document_is_an_error_naming_format_and_document() {
    let csv = Format::named("csv").unwrap();
    let e = csv.check(DocKind::FindMax).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--find-max prints text, json or json-stream, not csv"
    );
    let iperf3 = Format::named("iperf3-json").unwrap();
    let e = iperf3.check(DocKind::Run(RunKind::LATENCY)).unwrap_err();
    assert_eq!(e.format, "iperf3-json");
    assert!(
        e.to_string()
            .starts_with("a latency result prints text, json,")
            && e.to_string().ends_with(", not iperf3-json"),
        "{e}"
    );
    let md = Format::named("markdown").unwrap();
    let r = tcp_result();
    assert!(md.write(&Document::Run(&r), &View::default()).is_err());
    assert!(iperf3.check(DocKind::Run(RunKind::PPS)).is_ok());
}

#[test]
fn a_run_renders_through_its_format() {
    let r = tcp_result();
    let v = View::default();
    let json = Format::json().write(&Document::Run(&r), &v).unwrap();
    assert_eq!(json, crate::json::render(&r));
    let end = Format::json_stream().write(&Document::Run(&r), &v).unwrap();
    assert_eq!(end, crate::jsonl::end(&r));
    let csv = Format::named("csv").unwrap();
    assert_eq!(
        csv.write(&Document::Run(&r), &v).unwrap(),
        crate::csv::total_rows(&r)
    );
    let summary = Format::named("csv-summary").unwrap();
    assert_eq!(
        summary.write(&Document::Run(&r), &v).unwrap(),
        crate::csv::summary(&r)
    );
}

#[test]
fn live_output_follows_the_format() {
    let spec = TestSpec::Udp(UdpSpec::default());
    let start = LiveItem::Start {
        spec: &spec,
        server: "h:5201",
        embedded: false,
    };
    let mut csv = Format::named("csv").unwrap().live(View::default());
    assert_eq!(csv.item(&start), Some(crate::csv::header()));
    let mut stream = Format::json_stream().live(View::default());
    assert_eq!(
        stream.item(&start),
        Some(crate::jsonl::start(&spec, "h:5201", false))
    );
    // A failure: an error line in JSON, iperf3's error document, nothing in text.
    let err = LiveItem::Error("boom");
    assert_eq!(
        Format::json().live(View::default()).item(&err),
        Some(crate::jsonl::error("boom"))
    );
    let iperf3 = Format::named("iperf3-json").unwrap();
    assert_eq!(
        iperf3.live(View::default()).item(&err),
        Some(crate::iperf3_json::error_render("boom"))
    );
    assert_eq!(Format::text().live(View::default()).item(&err), None);
    // `ready`: an event in JSON Lines; the others leave it to stderr.
    assert!(stream
        .item(&LiveItem::Ready(1.5))
        .unwrap()
        .contains("ready"));
    assert_eq!(csv.item(&LiveItem::Ready(1.5)), None);
    // Text prints the header unless only the sums are asked for.
    let mut text = Format::text().live(View::default());
    assert!(!text.item(&start).unwrap().is_empty());
    let quiet = View {
        summary_only: true,
        ..View::default()
    };
    assert_eq!(Format::text().live(quiet).item(&start), Some(String::new()));
}

#[test]
fn quiet_while_running_is_todays_rule() {
    let v = View::default();
    let q = |name: &str, intervals: bool| {
        Format::named(name)
            .unwrap()
            .quiet_while_running(&v, intervals)
    };
    assert!(!q("text", true) && q("text", false));
    assert!(!q("csv", true) && q("csv", false));
    assert!(!q("json-stream", true) && !q("json-stream", false));
    assert!(q("json", true) && q("iperf3-json", true) && q("csv-summary", true));
    let summary_only = View {
        summary_only: true,
        ..View::default()
    };
    assert!(Format::text().quiet_while_running(&summary_only, true));
}

#[test]
fn a_saved_document_prints_as_saved_except_in_text() {
    let series: Vec<TrendSeries> = Vec::new();
    let inner = Document::Trend(&series);
    let saved = Document::Saved {
        doc: &inner,
        json: "{\"saved\": true}",
    };
    let v = View::default();
    // csv-summary has no form of a trend: the saved JSON, with a final newline.
    let s = Format::named("csv-summary").unwrap().write(&saved, &v);
    assert_eq!(s.unwrap(), "{\"saved\": true}\n");
    assert_eq!(
        Format::json().write(&saved, &v).unwrap(),
        "{\"saved\": true}\n"
    );
    assert_eq!(
        Format::text().write(&saved, &v).unwrap(),
        crate::trend::text(&series)
    );
}

#[test]
fn history_lists_go_through_the_exporters() {
    let runs = vec![HistoryRun {
        id: 7,
        kind: "tcp".into(),
        command: "hakaru tcp h".into(),
        ..HistoryRun::default()
    }];
    let v = View::default();
    let csv = Format::named("csv").unwrap();
    let s = csv.write(&Document::History(&runs), &v).unwrap();
    assert!(s.starts_with("id,started_at,kind,"), "{s}");
    assert_eq!(s.lines().count(), 2);
    let j = Format::json().write(&Document::History(&runs), &v).unwrap();
    let parsed: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(parsed[0]["id"], 7);
    // An empty list: nothing in text (the caller says so), `[]` in JSON, a header in CSV.
    assert_eq!(
        Format::text().write(&Document::History(&[]), &v).unwrap(),
        ""
    );
    assert_eq!(
        Format::json().write(&Document::History(&[]), &v).unwrap(),
        "[]\n"
    );
    assert_eq!(
        csv.write(&Document::History(&[]), &v)
            .unwrap()
            .lines()
            .count(),
        1
    );
}
