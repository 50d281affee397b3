//! SVG charts for HTML reports, drawn with plotters' SVG backend.
//!
//! A [`Chart`] is data only (series of points in the units shown); [`render`] turns it into a
//! [`Figure`]: the SVG text and the scale that maps its pixels back to values, which the HTML
//! carries as data attributes so a reader (or a test) can check a plotted point against the
//! result it came from. Long series are decimated per pixel column (the minimum and the
//! maximum of each column are kept, so peaks and dips survive) and the figure says so.

use std::fmt::Write;

use plotters::coord::ranged1d::Ranged;
use plotters::prelude::*;

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stroke {
    /// One flow among many: a thin line (1 px).
    Thin,
    /// A sum or headline series: a thick line (3 px).
    Thick,
    /// A sender's figure beside the receiver's: dashed (2 px).
    Dashed,
    /// A reference line such as interface counters: 2 px solid.
    Medium,
}

impl Stroke {
    fn width(self) -> u32 {
        match self {
            Stroke::Thin => 1,
            Stroke::Thick => 3,
            Stroke::Dashed | Stroke::Medium => 2,
        }
    }

    /// Each kind of series line has its own opacity, so a reader of the SVG can tell series
    /// lines from grid lines (opaque or faint) and legend samples (opaque): thin 0.85,
    /// thick 0.95, dashed 0.9, medium 0.8.
    pub fn opacity(self) -> f64 {
        match self {
            Stroke::Thin => 0.85,
            Stroke::Thick => 0.95,
            Stroke::Dashed => 0.9,
            Stroke::Medium => 0.8,
        }
    }
}

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) in the chart's units.
    pub points: Vec<(f64, f64)>,
    /// Line style.
    pub stroke: Stroke,
    /// Index into the palette.
    pub color: usize,
    /// Shown in the legend (flows are not: there may be hundreds).
    pub legend: bool,
}

/// One chart: axes, units and series.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Stable id, also the file name with `--svg DIR`.
    pub id: String,
    /// Caption.
    pub title: String,
    /// X axis description (with unit).
    pub x_desc: String,
    /// Y axis description (with unit).
    pub y_desc: String,
    /// What one y unit is worth in the result's own unit (1e9 for Gbit/s from bit/s).
    pub y_scale: f64,
    /// Logarithmic x axis (latency CDFs).
    pub log_x: bool,
    /// Logarithmic y axis (round trips over time, where the max dwarfs the median).
    pub log_y: bool,
    /// The lines.
    pub series: Vec<Series>,
}

/// A rendered chart.
#[derive(Debug, Clone)]
pub struct Figure {
    /// The chart's id.
    pub id: String,
    /// Caption.
    pub title: String,
    /// The SVG document.
    pub svg: String,
    /// X value range drawn.
    pub x_range: (f64, f64),
    /// Y value range drawn (chart units).
    pub y_range: (f64, f64),
    /// Plotting area in pixels: left, right, top, bottom.
    pub pixels: (i32, i32, i32, i32),
    /// Chart units to the result's units.
    pub y_scale: f64,
    /// Logarithmic x axis.
    pub log_x: bool,
    /// Logarithmic y axis.
    pub log_y: bool,
    /// True when some series had more points than pixel columns and were decimated.
    pub decimated: bool,
}

/// Chart size in pixels.
pub const SIZE: (u32, u32) = (960, 360);

const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The palette colour `i` (cycling).
fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// An interval's value as a step: flat from its start to its end.
pub(crate) fn step(rec: &hakaru_model::IntervalRecord, v: f64) -> [(f64, f64); 2] {
    [(rec.start, v), (rec.end, v)]
}

/// Keeps at most two points per pixel column: the lowest and the highest, in x order.
pub fn decimate(points: &[(f64, f64)], columns: usize, x_range: (f64, f64)) -> Vec<(f64, f64)> {
    if points.len() <= columns * 2 || columns == 0 {
        return points.to_vec();
    }
    let span = (x_range.1 - x_range.0).max(f64::MIN_POSITIVE);
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(columns * 2);
    let mut col = usize::MAX;
    let (mut lo, mut hi) = ((0.0, f64::INFINITY), (0.0, f64::NEG_INFINITY));
    let flush = |out: &mut Vec<(f64, f64)>, lo: (f64, f64), hi: (f64, f64)| {
        if lo.1.is_finite() {
            if lo.0 <= hi.0 {
                out.push(lo);
                if hi != lo {
                    out.push(hi);
                }
            } else {
                out.push(hi);
                out.push(lo);
            }
        }
    };
    for &(x, y) in points {
        let c = (((x - x_range.0) / span) * columns as f64).floor().max(0.0) as usize;
        if c != col {
            flush(&mut out, lo, hi);
            col = c;
            lo = (x, y);
            hi = (x, y);
            continue;
        }
        if y < lo.1 {
            lo = (x, y);
        }
        if y > hi.1 {
            hi = (x, y);
        }
    }
    flush(&mut out, lo, hi);
    out
}

fn ranges(chart: &Chart) -> ((f64, f64), (f64, f64)) {
    let pts = chart.series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    let mut y_min_pos = f64::INFINITY;
    for &(x, y) in pts {
        if x.is_finite() && y.is_finite() {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y1 = y1.max(y);
            if y > 0.0 {
                y_min_pos = y_min_pos.min(y);
            }
        }
    }
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if chart.log_x {
        x0 = x0.max(1e-3);
        x1 = x1.max(x0 * 10.0);
    } else {
        x0 = x0.min(0.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    // Percentile axes end at a whole number of nines, so every tick is a named percentile.
    if chart.x_desc.starts_with("percentile") {
        x1 = x1.ceil().max(1.0);
    }
    // Headroom above the highest line for the legend (time charts).
    if chart.log_y {
        let lo = if y_min_pos.is_finite() {
            y_min_pos * 0.8
        } else {
            1.0
        };
        let hi = (y1 * 3.0).max(lo * 10.0);
        return ((x0, x1), (lo, hi));
    }
    let y1 = match (y1 > 0.0, chart.log_x) {
        (false, _) => 1.0,
        (true, true) => y1 * 1.05,
        (true, false) => y1 * 1.35,
    };
    ((x0, x1), (0.0, y1))
}

/// Renders a chart to SVG. Every point (or, for a series drawn flat over intervals, every
/// interval) gets a hover target with an SVG `<title>` giving its exact value, so a reader
/// can read values off the chart without scripts.
pub fn render(chart: &Chart) -> Result<Figure, String> {
    let (xr, yr) = ranges(chart);
    let mut svg = String::new();
    let mut decimated = false;
    let (pixels, tips);
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(&chart.title, ("sans-serif", 17))
            .margin(12)
            .margin_right(28)
            .x_label_area_size(44)
            .y_label_area_size(76);
        let (x, y) = (xr.0..xr.1, yr.0..yr.1);
        let err = |e: plotters::drawing::DrawingAreaErrorKind<_>| e.to_string();
        (pixels, tips) = match (chart.log_x, chart.log_y) {
            (true, false) => {
                let mut c = builder.build_cartesian_2d(x.log_scale(), y).map_err(err)?;
                draw(&mut c, chart, xr, &mut decimated)?
            }
            (false, true) => {
                let mut c = builder.build_cartesian_2d(x, y.log_scale()).map_err(err)?;
                draw(&mut c, chart, xr, &mut decimated)?
            }
            (true, true) => {
                let mut c = builder
                    .build_cartesian_2d(x.log_scale(), y.log_scale())
                    .map_err(err)?;
                draw(&mut c, chart, xr, &mut decimated)?
            }
            (false, false) => {
                let mut c = builder.build_cartesian_2d(x, y).map_err(err)?;
                draw(&mut c, chart, xr, &mut decimated)?
            }
        };
        root.present().map_err(|e| e.to_string())?;
    }
    if let Some(end) = svg.rfind("</svg>") {
        svg.insert_str(end, &tips);
    }
    Ok(Figure {
        id: chart.id.clone(),
        title: chart.title.clone(),
        svg,
        x_range: xr,
        y_range: yr,
        pixels,
        y_scale: chart.y_scale,
        log_x: chart.log_x,
        log_y: chart.log_y,
        decimated,
    })
}

/// An x axis of percentiles on a "nines" scale: x is -log10(1 - q), so 1 is p90, 2 is p99,
/// 3 is p99.9 (a chart says so by an x description that starts with `percentile`).
pub fn nines(q: f64) -> f64 {
    -(1.0 - q.clamp(0.0, 1.0 - 1e-12)).log10()
}

/// The percentile an x of the nines scale stands for, as a label (`99.9%`).
fn nines_label(x: f64) -> String {
    let pct = 100.0 * (1.0 - 10f64.powf(-x));
    let digits = (x.ceil() as usize).saturating_sub(2).min(6);
    let s = format!("{pct:.digits$}");
    format!("p{s}")
}

/// The unit of an axis description: the text in its last parentheses (`rate (Mbit/s)`),
/// without a `log` remark, or the whole description when it has none.
fn unit_of(desc: &str) -> String {
    let inner = match (desc.rfind('('), desc.rfind(')')) {
        (Some(a), Some(b)) if a < b => &desc[a + 1..b],
        _ => desc,
    };
    inner.trim_end_matches(", log").trim().to_string()
}

/// A value for a tooltip: enough digits to be exact at the chart's precision.
pub fn value_text(v: f64) -> String {
    let a = v.abs();
    if v == 0.0 {
        "0".into()
    } else if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.3}")
    } else {
        format!("{v:.4}")
    }
}

/// The hover targets of one series: a point each, or one per run of equal values (a value
/// drawn flat over its interval), at most `budget` of them.
fn tips_of(s: &Series, chart: &Chart, budget: usize) -> Vec<((f64, f64), String)> {
    let (yu, xu) = (unit_of(&chart.y_desc), unit_of(&chart.x_desc));
    let pct_x = chart.x_desc.starts_with("percentile");
    let x_text = |x: f64| {
        if pct_x {
            nines_label(x)
        } else {
            format!("{} {xu}", tick_text(x))
        }
    };
    let mut out = Vec::new();
    let pts = &s.points;
    let mut i = 0;
    while i < pts.len() && out.len() < budget {
        let mut j = i;
        while j + 1 < pts.len() && pts[j + 1].1 == pts[i].1 && pts[j + 1].0 >= pts[j].0 {
            j += 1;
        }
        let (x0, x1, y) = (pts[i].0, pts[j].0, pts[i].1);
        let text = if j > i && !pct_x && !chart.log_x {
            format!(
                "{}: {} {yu}, {} to {}",
                s.name,
                value_text(y),
                tick_text(x0),
                x_text(x1)
            )
        } else {
            format!("{}: {} {yu} at {}", s.name, value_text(y), x_text(x0))
        };
        let x = if chart.log_x { x0 } else { (x0 + x1) / 2.0 };
        out.push(((x, y), text));
        i = j + 1;
    }
    out
}

fn hex(c: RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

/// A tick label (and a time in a tooltip): three significant digits below 1, at most three
/// decimals above, no trailing zeros (`0.0015`, `0.5`, `10`, `1000`).
pub fn tick_text(v: f64) -> String {
    let a = v.abs();
    let decimals = if a == 0.0 || a >= 1000.0 || v == v.trunc() {
        0
    } else if a >= 1.0 {
        3
    } else {
        (2 - a.log10().floor() as i32).clamp(0, 12) as usize
    };
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Escapes text for SVG.
fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Hover targets in all: beyond this a chart (hours of 64 flows) would weigh megabytes.
const MAX_TIPS: usize = 4000;

type Drawn = ((i32, i32, i32, i32), String);

fn draw<'a, X, Y>(
    c: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    chart: &Chart,
    xr: (f64, f64),
    decimated: &mut bool,
) -> Result<Drawn, String>
where
    X: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
{
    let pct_x = chart.x_desc.starts_with("percentile");
    let label = |x: &f64| nines_label(*x);
    let tick = |v: &f64| tick_text(*v);
    let mut mesh = c.configure_mesh();
    mesh.x_desc(&chart.x_desc)
        .y_desc(&chart.y_desc)
        .y_label_formatter(&tick)
        .axis_desc_style(("sans-serif", 15))
        .label_style(("sans-serif", 13))
        .light_line_style(RGBColor(235, 235, 235));
    if pct_x {
        mesh.x_labels((xr.1 - xr.0).round() as usize + 1)
            .x_label_formatter(&label);
    } else {
        mesh.x_label_formatter(&tick);
    }
    mesh.draw().map_err(|e| e.to_string())?;
    let (px, py) = c.plotting_area().get_pixel_range();
    let columns = (px.end - px.start).max(1) as usize;
    let mut any_legend = false;
    let mut tips = String::from("<g class=\"tips\">");
    // Legend series (sums, headlines) first: they get tooltips before the budget runs out.
    let mut order: Vec<&Series> = chart.series.iter().filter(|s| s.legend).collect();
    order.extend(chart.series.iter().filter(|s| !s.legend));
    let mut left = MAX_TIPS;
    for s in order {
        let col = color(s.color);
        for ((x, y), text) in tips_of(s, chart, left) {
            if !(x.is_finite() && y.is_finite()) || (chart.log_y && y <= 0.0) {
                continue;
            }
            if (chart.log_x && x <= 0.0) || x < xr.0 || x > xr.1 {
                continue;
            }
            left -= 1;
            let (cx, cy) = c.backend_coord(&(x, y));
            let _ = write!(
                tips,
                "<circle cx=\"{cx}\" cy=\"{cy}\" r=\"5\" fill=\"{}\" fill-opacity=\"0\" stroke=\"none\" pointer-events=\"all\"><title>{}</title></circle>",
                hex(col),
                xml(&text)
            );
        }
    }
    tips.push_str("</g>");
    // Reference lines (interfaces) under the flows, the senders' dashes above them, and the
    // sums on top, whatever order the series come in.
    let mut layers: Vec<&Series> = Vec::with_capacity(chart.series.len());
    for kind in [Stroke::Medium, Stroke::Thin, Stroke::Dashed, Stroke::Thick] {
        layers.extend(chart.series.iter().filter(|s| s.stroke == kind));
    }
    for s in layers {
        let pts = decimate(&s.points, columns, xr);
        if pts.len() < s.points.len() {
            *decimated = true;
        }
        let col = color(s.color);
        let style = ShapeStyle::from(&col.mix(s.stroke.opacity())).stroke_width(s.stroke.width());
        let anno = if s.stroke == Stroke::Dashed {
            c.draw_series(DashedLineSeries::new(pts, 6, 4, style))
                .map_err(|e| e.to_string())?
        } else {
            c.draw_series(LineSeries::new(pts, style))
                .map_err(|e| e.to_string())?
        };
        if s.legend {
            any_legend = true;
            let w = s.stroke.width();
            anno.label(s.name.clone()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(w))
            });
        }
    }
    if any_legend {
        c.configure_series_labels()
            .position(if chart.log_x {
                SeriesLabelPosition::LowerRight
            } else {
                SeriesLabelPosition::UpperRight
            })
            .label_font(("sans-serif", 13))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(180, 180, 180))
            .draw()
            .map_err(|e| e.to_string())?;
    }
    Ok(((px.start, px.end, py.start, py.end), tips))
}

/// The SI unit and divisor for a rate whose largest value is `max` (bit/s or packets/s).
pub fn rate_unit(max: f64, unit: &str) -> (String, f64) {
    let (prefix, div) = if max >= 1e9 {
        ("G", 1e9)
    } else if max >= 1e6 {
        ("M", 1e6)
    } else if max >= 1e3 {
        ("k", 1e3)
    } else {
        ("", 1.0)
    };
    (format!("{prefix}{unit}"), div)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimation_keeps_extremes_per_column() {
        let pts: Vec<(f64, f64)> = (0..1000).map(|i| (i as f64, (i % 10) as f64)).collect();
        let d = decimate(&pts, 10, (0.0, 1000.0));
        assert!(d.len() <= 20, "{}", d.len());
        assert!(d.iter().any(|p| p.1 == 9.0) && d.iter().any(|p| p.1 == 0.0));
        // x stays in order.
        assert!(d.windows(2).all(|w| w[0].0 <= w[1].0));
        // Short series are left alone.
        assert_eq!(decimate(&pts[..15], 10, (0.0, 15.0)), pts[..15].to_vec());
    }

    #[test]
    fn units_follow_the_largest_value() {
        assert_eq!(rate_unit(2.5e9, "bit/s"), ("Gbit/s".to_string(), 1e9));
        assert_eq!(rate_unit(900.0, "pkt/s"), ("pkt/s".to_string(), 1.0));
        assert_eq!(rate_unit(1.2e6, "pkt/s").1, 1e6);
    }

    #[test]
    fn tick_labels_keep_three_significant_digits_below_one() {
        let t: Vec<String> = [0.0, 0.0015, 0.00025, 0.5, 1.8, 10.0, 2.125, 1500.0]
            .map(tick_text)
            .into();
        assert_eq!(
            t,
            ["0", "0.0015", "0.00025", "0.5", "1.8", "10", "2.125", "1500"]
        );
    }

    #[test]
    fn a_chart_renders_with_its_scale() {
        let c = Chart {
            id: "t".into(),
            title: "test".into(),
            x_desc: "time (s)".into(),
            y_desc: "Gbit/s".into(),
            y_scale: 1e9,
            log_x: false,
            log_y: false,
            series: vec![Series {
                name: "sum".into(),
                points: vec![(1.0, 2.0), (2.0, 4.0)],
                stroke: Stroke::Thick,
                color: 0,
                legend: true,
            }],
        };
        let f = render(&c).unwrap();
        assert!(f.svg.starts_with("<svg") && f.svg.contains("polyline"));
        assert!(f.svg.contains("Gbit/s") && f.svg.contains("time (s)"));
        assert_eq!(f.x_range.0, 0.0);
        assert!(f.y_range.1 > 4.0);
        let (l, r, t, b) = f.pixels;
        assert!(l < r && t < b);
    }
}
