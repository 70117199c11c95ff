//! A hand-written SVG chart: the TTFT distribution (CDF, log-scale time axis) per policy.

use std::fmt::Write;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 200.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
/// Series colours (colour-blind friendly), reused in order.
const COLOURS: &[&str] = &["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000"];
/// Points drawn per series: enough for a smooth curve, small enough for a light file.
const POINTS: usize = 400;

/// `series`: (name, ascending TTFTs in ms). Returns the SVG document.
pub fn ttft_cdf(title: &str, series: &[(&str, &[f64])]) -> String {
    let positive = |v: &&f64| **v > 0.0 && v.is_finite();
    let all = || series.iter().flat_map(|(_, v)| v.iter()).filter(positive);
    let lo = all().copied().fold(f64::INFINITY, f64::min);
    let hi = all().copied().fold(0.0, f64::max);
    let (lo, hi) = if lo.is_finite() && hi > 0.0 { (lo, hi) } else { (1.0, 10.0) };
    // Whole decades around the data.
    let (d0, d1) = (lo.log10().floor(), hi.log10().ceil().max(lo.log10().floor() + 1.0));
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let x = |ms: f64| LEFT + (ms.max(lo).log10() - d0) / (d1 - d0) * plot_w;
    let y = |p: f64| TOP + (1.0 - p) * plot_h;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(svg, r#"<text x="{LEFT}" y="22" font-size="14">{}</text>"#, escape(title));
    // Grid and axes: decades on x, quarters on y.
    let mut decade = d0;
    while decade <= d1 {
        let px = x(10f64.powf(decade));
        let _ = writeln!(
            svg,
            r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#ddd"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            TOP + plot_h,
            TOP + plot_h + 18.0,
            ms_label(10f64.powf(decade))
        );
        decade += 1.0;
    }
    for quarter in 0..=4 {
        let p = f64::from(quarter) / 4.0;
        let py = y(p);
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{:.2}</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            py + 4.0,
            p
        );
    }
    let _ = writeln!(
        svg,
        r#"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="black"/>"#
    );
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">time to first token (log scale)</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 18.0
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">fraction of requests</text>"#,
        TOP + plot_h / 2.0
    );
    for (i, (name, values)) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let n = values.len();
        if n > 0 {
            let step = (n / POINTS).max(1);
            let mut points = String::new();
            for k in (0..n).step_by(step).chain([n - 1]) {
                let _ = write!(points, "{:.1},{:.1} ", x(values[k]), y((k + 1) as f64 / n as f64));
            }
            let _ = writeln!(
                svg,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
                points.trim_end()
            );
        }
        let ly = TOP + 10.0 + 20.0 * i as f64;
        let lx = LEFT + plot_w + 14.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 20.0,
            lx + 26.0,
            ly + 4.0,
            escape(name)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn ms_label(ms: f64) -> String {
    if ms >= 1000.0 { format!("{} s", ms / 1000.0) } else { format!("{ms} ms") }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}
