//! The replay's chart: the TTFT distribution (CDF) per policy on a log time axis, drawn with
//! plotters' SVG backend. The legend has a column of its own right of the plot, so no curve
//! runs under it however many policies are compared.

use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The plot's part of the canvas (title, axes, curves), in pixels; the legend's column is
/// added on the right, as wide as its longest label.
const PLOT: (u32, u32) = (800, 480);
/// Margins and the width of the fraction labels' area, in pixels.
const MARGIN: u32 = 12;
const MARGIN_RIGHT: u32 = 28;
const Y_LABELS: u32 = 64;
/// Series colours: Tableau 10 with its grey swapped for indigo, as grey is the grid's and
/// black the frame's. Ten that stay apart from each other; an eleventh series reuses the first.
pub const COLOURS: [RGBColor; 10] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x39, 0x3b, 0x79),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
];
/// Points drawn per series: enough for a smooth curve, few enough for a light file.
const POINTS: usize = 400;
/// Pixels each time label is given: "500 ms" plus a clear gap. Labels are 1-2-5 steps when
/// they fit, else 1-3, else decades, else every second (third, …) decade.
const LABEL_SPACING: u32 = 72;
/// Text sizes in plotters' units (the SVG backend writes size / 1.24 px: 15 → 12 px).
const TEXT: u32 = 15;
const TITLE: u32 = 20;
/// The legend's layout, in pixels: its gap from the plot, padding, row height, the colour
/// swatch's width and the gap after it, and an estimate of a 12 px sans-serif character's
/// width (generous: an SVG viewer picks the font, so the text cannot be measured here).
const LEGEND_GAP: u32 = 8;
const LEGEND_PAD: u32 = 10;
const LEGEND_ROW: u32 = 20;
const SWATCH: u32 = 24;
const SWATCH_GAP: u32 = 8;
const CHAR_WIDTH: f64 = 6.8;
/// Longer labels are cut with "…" (the summary table on stdout has them whole).
const LABEL_CHARS: usize = 64;
/// The legend box's border.
pub const LEGEND_BORDER: RGBColor = RGBColor(0x99, 0x99, 0x99);

/// The TTFT CDF of each of `series` (name, ascending TTFTs in ms) as an SVG document. Fails
/// only if plotters does: the backend writes to a string, so there is no I/O to fail.
pub fn ttft_cdf(title: &str, series: &[(&str, &[f64])]) -> Result<String, Box<dyn std::error::Error>> {
    let (lo, hi) = time_range(series);
    let labels: Vec<String> = series.iter().map(|(name, _)| shorten(name)).collect();
    let legend = legend_size(&labels);
    let size = (PLOT.0 + legend.0, PLOT.1.max(legend.1 + 2 * MARGIN + TITLE * 2));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE)?;
        let body = root.titled(title, ("sans-serif", TITLE))?;
        let (plot, side) = body.split_horizontally(PLOT.0);
        // The plot's width, for how many time labels fit: its part of the canvas less margins
        // and the label area (the chart's own measure of it exists only once the axes are built).
        let (labelled, minor) = time_ticks(lo, hi, PLOT.0 - MARGIN - MARGIN_RIGHT - Y_LABELS);
        let mut chart = ChartBuilder::on(&plot)
            .margin(MARGIN)
            // Room for half of the last time label, centred on the plot's right edge.
            .margin_right(MARGIN_RIGHT)
            .x_label_area_size(48)
            .y_label_area_size(Y_LABELS)
            .build_cartesian_2d(
                (lo..hi).log_scale().with_key_points(labelled).with_light_points(minor),
                Fractions(RangedCoordf64::from(0f64..1f64)),
            )?;
        chart
            .configure_mesh()
            .x_label_formatter(&|ms| time_label(*ms))
            .y_label_formatter(&|p| format!("{p:.2}"))
            .x_desc("time to first token, log scale (lower is better: the further left a curve, the faster)")
            .y_desc("fraction of requests with TTFT at most x")
            .label_style(("sans-serif", TEXT))
            .axis_desc_style(("sans-serif", TEXT))
            // Labelled ticks and quarters a shade darker than the lines between them.
            .bold_line_style(RGBColor(0xcc, 0xcc, 0xcc))
            .light_line_style(RGBColor(0xee, 0xee, 0xee))
            // plotters draws axis lines and ticks as polylines; the frame below replaces them,
            // so the only polylines are the curves, one per policy.
            .axis_style(TRANSPARENT)
            .draw()?;
        chart.plotting_area().draw(&Rectangle::new([(lo, 0.0), (hi, 1.0)], BLACK))?;
        for (i, (_, values)) in series.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            chart.draw_series(LineSeries::new(cdf(values, lo, hi), colour.stroke_width(2)))?;
        }
        // Level with the plot's top edge.
        let top = i32::try_from(MARGIN).unwrap_or(0);
        draw_legend(&side, (i32::try_from(LEGEND_GAP).unwrap_or(0), top), &labels)?;
        root.present()?;
    }
    Ok(svg)
}

/// `name` cut to [`LABEL_CHARS`] characters.
fn shorten(name: &str) -> String {
    if name.chars().count() <= LABEL_CHARS {
        return name.to_string();
    }
    let mut cut: String = name.chars().take(LABEL_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// The legend column's width (gap included) and the legend box's height, in pixels.
fn legend_size(labels: &[String]) -> (u32, u32) {
    let widest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    // A label is at most LABEL_CHARS characters: the product is a few hundred pixels.
    let text = (widest as f64 * CHAR_WIDTH).ceil() as u32;
    let n = u32::try_from(labels.len()).unwrap_or(u32::MAX);
    (
        LEGEND_GAP + 2 * LEGEND_PAD + SWATCH + SWATCH_GAP + text + MARGIN,
        2 * LEGEND_PAD + n.saturating_mul(LEGEND_ROW),
    )
}

/// The legend at `at` in `area`: a box with a row per series, its colour's swatch and label.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    at: (i32, i32),
    labels: &[String],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    if labels.is_empty() {
        return Ok(());
    }
    let (w, h) = legend_size(labels);
    let (w, h) = (px(w - LEGEND_GAP - MARGIN), px(h));
    let (x, y) = at;
    area.draw(&Rectangle::new([(x, y), (x + w, y + h)], WHITE.filled()))?;
    area.draw(&Rectangle::new([(x, y), (x + w, y + h)], LEGEND_BORDER))?;
    let font = ("sans-serif", TEXT).into_font().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, label) in labels.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let row = y + px(LEGEND_PAD) + px(LEGEND_ROW) * i32::try_from(i).unwrap_or(0) + px(LEGEND_ROW) / 2;
        let left = x + px(LEGEND_PAD);
        area.draw(&Rectangle::new([(left, row - 3), (left + px(SWATCH), row + 3)], colour.filled()))?;
        area.draw_text(label, &font, (left + px(SWATCH + SWATCH_GAP), row))?;
    }
    Ok(())
}

/// Layout sizes are small constants and label counts: they fit an i32.
fn px(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

/// The fraction-of-requests axis, 0 to 1, labelled in quarters. plotters' own f64 axis steps
/// only in 1, 2 or 5 × 10^k, and its custom key points (`with_key_points`) cannot label an f64
/// axis in plotters 0.3.7.
struct Fractions(RangedCoordf64);

impl Ranged for Fractions {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.0.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // Grid lines on the labels only: no light lines between quarters.
        if hint.weight().allow_light_points() { Vec::new() } else { vec![0.0, 0.25, 0.5, 0.75, 1.0] }
    }

    fn range(&self) -> Range<f64> {
        self.0.range()
    }
}

/// The time axis' span: the positive finite TTFTs with a little room either side (a
/// twentieth of their span on the log scale, at least 10 %), so the curves fill the plot;
/// widened to the 1-2-5 values around it when fewer than two would be labelled. 1–10 ms when
/// there are none. A TTFT under 1 ns counts as 1 ns here and is drawn on the axis' edge
/// rather than stretching the axis over hundreds of empty decades.
fn time_range(series: &[(&str, &[f64])]) -> (f64, f64) {
    let values = || series.iter().flat_map(|(_, v)| v.iter().copied()).filter(|v| *v > 0.0 && v.is_finite());
    let (lo, hi) = (values().fold(f64::INFINITY, f64::min), values().fold(0.0, f64::max));
    if !lo.is_finite() {
        return (1.0, 10.0);
    }
    let lo = lo.max(1e-6);
    let hi = hi.max(lo);
    let pad = 10f64.powf(((hi / lo).log10() / 20.0).max(1.1f64.log10()));
    let (lo, hi) = (lo / pad, hi * pad);
    if one_two_five(lo, hi).len() >= 2 {
        return (lo, hi);
    }
    // The 1-2-5 values just outside: one step apart at most on either side.
    let around = one_two_five(lo / 10.0, hi * 10.0);
    let below = around.iter().copied().filter(|v| *v <= lo).fold(lo / 10.0, f64::max);
    let above = around.iter().copied().filter(|v| *v >= hi).fold(hi * 10.0, f64::min);
    (below, above)
}

/// The 1×, 2× and 5× powers of ten from `lo` to `hi` (with a hair's tolerance: powers of ten
/// are inexact in f64), ascending.
fn one_two_five(lo: f64, hi: f64) -> Vec<f64> {
    every(lo, hi, &[1, 2, 5], 1)
}

/// `mantissas` × 10^d from `lo` to `hi`, for every `stride`-th decade d, ascending.
fn every(lo: f64, hi: f64, mantissas: &[u32], stride: u32) -> Vec<f64> {
    // Decades of TTFTs are well within i32; the casts only drop the (zero) fraction.
    let (first, last) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    (first..=last)
        .filter(|d| d.abs_diff(first) % stride == 0)
        .flat_map(|d| mantissas.iter().map(move |m| f64::from(*m) * 10f64.powi(d)))
        .filter(|v| *v >= lo * (1.0 - 1e-9) && *v <= hi * (1.0 + 1e-9))
        .collect()
}

/// The time axis' ticks between `lo` and `hi` ms on a plot `width` pixels wide: labelled
/// values (1-2-5 steps, else 1-3, else decades, else every n-th decade: the densest whose
/// labels do not crowd) and unlabelled grid lines at the other 1×…9× of every decade.
fn time_ticks(lo: f64, hi: f64, width: u32) -> (Vec<f64>, Vec<f64>) {
    let span = (hi / lo).log10();
    // Every gap between neighbouring labels is at least LABEL_SPACING pixels.
    let fits = |ticks: &[f64]| {
        ticks.windows(2).all(|p| (p[1] / p[0]).log10() / span * f64::from(width) >= f64::from(LABEL_SPACING))
    };
    let mut labelled = one_two_five(lo, hi);
    if !fits(&labelled) {
        labelled = every(lo, hi, &[1, 3], 1);
    }
    if !fits(&labelled) {
        // Ends: a stride past the span leaves one label, which always fits.
        labelled = (1..).map(|stride| every(lo, hi, &[1], stride)).find(|t| fits(t)).unwrap_or_default();
    }
    let minor = every(lo, hi, &[1, 2, 3, 4, 5, 6, 7, 8, 9], 1)
        .into_iter()
        .filter(|v| !labelled.contains(v))
        .collect();
    (labelled, minor)
}

/// The CDF's points, (TTFT, fraction of requests at most that), thinned to about [`POINTS`]
/// and always ending at (max, 1). TTFTs outside the axis (zero) are drawn on its edge.
fn cdf(values: &[f64], lo: f64, hi: f64) -> Vec<(f64, f64)> {
    let n = values.len();
    if n == 0 {
        return Vec::new();
    }
    let step = (n / POINTS).max(1);
    let mut picks: Vec<usize> = (0..n).step_by(step).collect();
    if picks.last() != Some(&(n - 1)) {
        picks.push(n - 1);
    }
    // `max` first: it maps NaN to the axis' start.
    picks.into_iter().map(|k| (values[k].max(lo).min(hi), (k + 1) as f64 / n as f64)).collect()
}

/// "1 ms", "10 ms", "100 ms", "1 s", …: the largest unit the value is at least one of, so a
/// label never reads "0.001 s" or "1000 ms".
fn time_label(ms: f64) -> String {
    const UNITS: [(f64, &str); 4] = [(1e3, "s"), (1.0, "ms"), (1e-3, "µs"), (1e-6, "ns")];
    // A hair under the unit still counts as one: powers of ten are inexact in f64.
    let (scale, unit) = UNITS.iter().copied().find(|(scale, _)| ms >= *scale * 0.9995).unwrap_or(UNITS[3]);
    // Rounded to three decimals for the same reason (10^-3 is not exactly 0.001).
    let value = (ms / scale * 1000.0).round() / 1000.0;
    format!("{value} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_is_svg_with_a_curve_and_a_legend_entry_per_series() {
        let ttfts: Vec<f64> = (1..=1000).map(|i| f64::from(i) * 3.7).collect();
        let svg = ttft_cdf("TTFT <test>", &[("a & b", &ttfts), ("empty", &[])]).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 1, "a curve for the series with data only");
        for text in ["TTFT &lt;test&gt;", "a &amp; b", "empty", "10 ms", "1 s", "0.25"] {
            assert!(svg.contains(&format!(">\n{text}\n</text>")), "{text}: {svg}");
        }
    }

    #[test]
    fn time_labels_are_round_with_the_largest_unit() {
        let labels: Vec<String> =
            [1e-4, 0.01, 1.0, 10.0, 100.0 + 1e-12, 1000.0, 1e4, 2.5e3].into_iter().map(time_label).collect();
        assert_eq!(labels, ["100 ns", "10 µs", "1 ms", "10 ms", "100 ms", "1 s", "10 s", "2.5 s"]);
    }

    #[test]
    fn time_ticks_step_1_2_5_when_they_fit_else_decades_else_every_nth_decade() {
        let names = |ticks: &[f64]| ticks.iter().map(|ms| time_label(*ms)).collect::<Vec<_>>();
        let (labelled, minor) = time_ticks(8.0, 1200.0, 700);
        assert_eq!(names(&labelled), ["10 ms", "20 ms", "50 ms", "100 ms", "200 ms", "500 ms", "1 s"]);
        assert!(minor.contains(&9.0) && minor.contains(&30.0) && !minor.contains(&20.0), "{minor:?}");
        let (labelled, _) = time_ticks(1.0, 1e4, 700);
        assert_eq!(
            names(&labelled),
            ["1 ms", "3 ms", "10 ms", "30 ms", "100 ms", "300 ms", "1 s", "3 s", "10 s"]
        );
        let (labelled, _) = time_ticks(1.0, 1e6, 700);
        assert_eq!(names(&labelled), ["1 ms", "10 ms", "100 ms", "1 s", "10 s", "100 s", "1000 s"]);
        // Twelve decades on 400 px: five labels fit, so every third decade is labelled.
        let (labelled, _) = time_ticks(1e-6, 1e6, 400);
        assert_eq!(names(&labelled), ["1 ns", "1 µs", "1 ms", "1 s", "1000 s"]);
    }

    #[test]
    fn the_axis_fits_the_data_with_a_little_room() {
        let (lo, hi) = time_range(&[("a", &[8.2, 950.0]), ("b", &[0.0, 4200.0])]);
        assert!((5.5..8.2).contains(&lo) && (4200.0..6000.0).contains(&hi), "{lo} {hi}");
        // Too narrow for two 1-2-5 labels: widened to the ones around it.
        let (lo, hi) = time_range(&[("a", &[120.0, 150.0])]);
        assert!((lo - 100.0).abs() < 1e-9 && (hi - 200.0).abs() < 1e-9, "{lo} {hi}");
        assert_eq!(time_range(&[("a", &[])]), (1.0, 10.0));
        let (lo, _) = time_range(&[("a", &[1e-300, 2.0])]);
        assert!(lo < 1e-6 && lo > 1e-7, "{lo}");
    }

    #[test]
    fn ten_series_have_ten_colours_and_the_legend_is_right_of_the_plot() {
        let ttfts: Vec<f64> = (1..=100).map(f64::from).collect();
        let names: Vec<String> = (0..10).map(|i| format!("policy-{i}")).collect();
        let series: Vec<(&str, &[f64])> = names.iter().map(|n| (n.as_str(), &ttfts[..])).collect();
        let svg = ttft_cdf("ten", &series).unwrap();
        for colour in COLOURS {
            let hex = format!("#{:02X}{:02X}{:02X}", colour.0, colour.1, colour.2);
            assert!(svg.contains(&hex), "{hex}");
        }
        assert!(
            svg.starts_with(&format!("<svg width=\"{}\"", PLOT.0 + legend_size(&names).0)),
            "{}",
            &svg[..80]
        );
    }
}
