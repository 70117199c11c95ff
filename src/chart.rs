//! The replay's chart: the TTFT distribution (CDF) per policy on a log time axis, drawn with
//! plotters' SVG backend.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// The canvas, in pixels.
const SIZE: (u32, u32) = (800, 480);
/// Margins and the width of the fraction labels' area, in pixels.
const MARGIN: u32 = 12;
const MARGIN_RIGHT: u32 = 28;
const Y_LABELS: u32 = 64;
/// Series colours (Okabe–Ito: colour-blind friendly), reused in order.
const COLOURS: [RGBColor; 7] = [
    RGBColor(0x00, 0x72, 0xb2),
    RGBColor(0xd5, 0x5e, 0x00),
    RGBColor(0x00, 0x9e, 0x73),
    RGBColor(0xcc, 0x79, 0xa7),
    RGBColor(0xe6, 0x9f, 0x00),
    RGBColor(0x56, 0xb4, 0xe9),
    RGBColor(0x00, 0x00, 0x00),
];
/// Points drawn per series: enough for a smooth curve, few enough for a light file.
const POINTS: usize = 400;
/// Pixels each time label is given: "100 ms" plus a clear gap. A trace spanning more decades
/// than fit gets a label every second (third, …) decade rather than labels that touch.
const LABEL_SPACING: u32 = 80;
/// Text sizes in plotters' units (the SVG backend writes size / 1.24 px: 15 → 12 px).
const TEXT: u32 = 15;
const TITLE: u32 = 20;

/// The TTFT CDF of each of `series` (name, ascending TTFTs in ms) as an SVG document. Fails
/// only if plotters does: the backend writes to a string, so there is no I/O to fail.
pub fn ttft_cdf(title: &str, series: &[(&str, &[f64])]) -> Result<String, Box<dyn std::error::Error>> {
    let (first, last) = decades(series);
    // The axis spans whole decades, so every labelled tick is a round "1 / 10 / 100" value.
    let (lo, hi) = (10f64.powi(first), 10f64.powi(last));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        // The plot's width, for how many time labels fit: the canvas less margins and the
        // label area (the chart's own measure of it exists only once the axes are built).
        let (labelled, minor) = time_ticks(first, last, SIZE.0 - MARGIN - MARGIN_RIGHT - Y_LABELS);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", TITLE))
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
            .x_desc("time to first token (log scale)")
            .y_desc("fraction of requests")
            .label_style(("sans-serif", TEXT))
            .axis_desc_style(("sans-serif", TEXT))
            // Decades and quarters a shade darker than the 2×…9× lines between decades.
            .bold_line_style(RGBColor(0xcc, 0xcc, 0xcc))
            .light_line_style(RGBColor(0xee, 0xee, 0xee))
            // plotters draws axis lines and ticks as polylines; the frame below replaces them,
            // so the only polylines are the curves, one per policy.
            .axis_style(TRANSPARENT)
            .draw()?;
        chart.plotting_area().draw(&Rectangle::new([(lo, 0.0), (hi, 1.0)], BLACK))?;
        for (i, (name, values)) in series.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            chart
                .draw_series(LineSeries::new(cdf(values, lo, hi), colour.stroke_width(2)))?
                .label(*name)
                // A bar, not a line: a line would be one more polyline.
                .legend(move |(x, y)| Rectangle::new([(x, y - 1), (x + 20, y + 2)], colour.filled()));
        }
        // A CDF rises to the right, so its lower right is empty whatever the data.
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .margin(10)
            .label_font(("sans-serif", TEXT))
            .background_style(WHITE.mix(0.9))
            .border_style(RGBColor(0x99, 0x99, 0x99))
            .draw()?;
        root.present()?;
    }
    Ok(svg)
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

/// The whole decades (powers of ten of ms) around the positive finite TTFTs; 1–10 ms when
/// there are none. The axis starts at 1 ns at the lowest: a smaller TTFT is drawn on its edge
/// rather than stretching the axis over hundreds of empty decades.
fn decades(series: &[(&str, &[f64])]) -> (i32, i32) {
    let values = || series.iter().flat_map(|(_, v)| v.iter().copied()).filter(|v| *v > 0.0 && v.is_finite());
    let lo = values().fold(f64::INFINITY, f64::min);
    let hi = values().fold(0.0, f64::max);
    if !lo.is_finite() {
        return (0, 1);
    }
    // TTFTs are well within i32 decades; the casts only drop the (zero) fraction.
    let first = (lo.log10().floor() as i32).max(-6);
    let last = (hi.log10().ceil() as i32).max(first + 1);
    (first, last)
}

/// The time axis' ticks from 10^`first` to 10^`last` ms on a plot `width` pixels wide:
/// labelled decades (every one that fits, so labels never crowd) and unlabelled grid lines at
/// 2×…9× of every decade, the usual log-paper grid.
fn time_ticks(first: i32, last: i32, width: u32) -> (Vec<f64>, Vec<f64>) {
    let fit = (width / LABEL_SPACING).max(2);
    let decades = last.abs_diff(first);
    // Every `stride`-th decade is labelled: the fewest skipped that leaves them room.
    let stride = decades.div_ceil(fit - 1).max(1);
    let labelled =
        (first..=last).filter(|d| d.abs_diff(first) % stride == 0).map(|d| 10f64.powi(d)).collect();
    let minor = (first..last).flat_map(|d| (2..=9).map(move |m| f64::from(m) * 10f64.powi(d))).collect();
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
        for text in ["TTFT &lt;test&gt;", "a &amp; b", "empty", "1 ms", "10 s", "0.25"] {
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
    fn time_ticks_label_decades_and_thin_them_when_they_would_crowd() {
        let (labelled, minor) = time_ticks(0, 3, 700);
        assert_eq!(
            labelled.iter().map(|ms| time_label(*ms)).collect::<Vec<_>>(),
            ["1 ms", "10 ms", "100 ms", "1 s"]
        );
        assert_eq!(minor.len(), 3 * 8);
        // Twelve decades on 400 px: five labels fit, so every third decade is labelled.
        let (labelled, _) = time_ticks(-6, 6, 400);
        assert_eq!(
            labelled.iter().map(|ms| time_label(*ms)).collect::<Vec<_>>(),
            ["1 ns", "1 µs", "1 ms", "1 s", "1000 s"]
        );
    }

    #[test]
    fn the_axis_spans_whole_decades_around_the_data() {
        assert_eq!(decades(&[("a", &[8.2, 950.0]), ("b", &[0.0, 4200.0])]), (0, 4));
        assert_eq!(decades(&[("a", &[10.0])]), (1, 2));
        assert_eq!(decades(&[("a", &[])]), (0, 1));
        assert_eq!(decades(&[("a", &[1e-300, 2.0])]), (-6, 1));
    }
}
