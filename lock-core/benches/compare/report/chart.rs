//! `handoff.svg`: the handoff latency distributions, as CDFs on a log time axis.

use std::fmt::Write as _;

use super::{Curve, Report};

const W: f64 = 820.0;
const H: f64 = 440.0;
const LEFT: f64 = 60.0;
/// Room for the legend.
const RIGHT: f64 = 250.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const PLOT_W: f64 = W - LEFT - RIGHT;
const PLOT_H: f64 = H - TOP - BOTTOM;

/// The plot's axes: a log latency axis spanning whole decades, and the quantile axis.
struct Axes {
    /// The decades (powers of ten of µs) at the left and right edges.
    first: i32,
    last: i32,
}

impl Axes {
    /// Decades that hold every latency of `curves`.
    fn fitting(curves: &[Curve]) -> Self {
        let all = curves.iter().flat_map(|c| c.lat.iter().copied());
        let (lo, hi) = all
            .filter(|v| *v > 0.0)
            .fold((f64::INFINITY, 0.0_f64), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            });
        if lo > hi {
            return Self { first: 1, last: 6 };
        }
        let first = lo.log10().floor() as i32;
        let last = (hi.log10().ceil() as i32).max(first + 1);
        Self { first, last }
    }

    fn x(&self, us: f64) -> f64 {
        let decades = (self.last - self.first) as f64;
        LEFT + (us.max(1e-3).log10() - self.first as f64) / decades * PLOT_W
    }

    fn y(&self, quantile: f64) -> f64 {
        TOP + (1.0 - quantile) * PLOT_H
    }
}

impl Report {
    /// The handoff latency distributions (release sent → next acquire returns), one curve
    /// per row: dashed with 1 worker, solid with 2. Marked: the goals' 3 and 4 round trips
    /// (the round trip of the last runtime) and 1 ms.
    pub(crate) fn svg(&self) -> String {
        let axes = Axes::fitting(&self.curves);
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{LEFT}" y="22" font-size="14">Handoff latency (release sent → next acquire returns), CDF; dashed: 1 worker, solid: 2</text>"#
        );
        grid(&mut s, &axes);
        if let Some(rtt) = self.rtt.get(&2).or_else(|| self.rtt.get(&1)) {
            for (us, label) in [(3.0 * rtt, "3 RTT"), (4.0 * rtt, "4 RTT"), (1000.0, "1 ms")] {
                let x = axes.x(us);
                let _ = writeln!(
                    s,
                    r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#888" stroke-dasharray="2 3"/><text x="{x:.1}" y="{:.1}" fill="#666" text-anchor="middle">{label}</text>"##,
                    TOP + PLOT_H,
                    TOP - 4.0
                );
            }
        }
        let curves = self.curves.iter().filter(|c| !c.lat.is_empty());
        for (i, curve) in curves.enumerate() {
            plot(&mut s, &axes, curve, TOP + 10.0 + 18.0 * i as f64);
        }
        s.push_str("</svg>\n");
        s
    }
}

/// A line and a label per decade of latency and per quarter of the quantiles.
fn grid(s: &mut String, axes: &Axes) {
    for decade in axes.first..=axes.last {
        let x = axes.x(10f64.powi(decade));
        let label = match decade {
            d if d < 3 => format!("{} µs", 10u64.pow(d.max(0) as u32)),
            d if d < 6 => format!("{} ms", 10u64.pow((d - 3) as u32)),
            d => format!("{} s", 10u64.pow((d - 6) as u32)),
        };
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{label}</text>"##,
            TOP + PLOT_H,
            TOP + PLOT_H + 18.0
        );
    }
    for q in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let y = axes.y(q);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" text-anchor="end">{q}</text>"##,
            LEFT + PLOT_W,
            LEFT - 6.0,
            y + 4.0
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">latency (log scale)</text>"##,
        LEFT + PLOT_W / 2.0,
        H - 10.0
    );
}

/// `curve`'s CDF (at most about 300 points), and its legend entry at height `legend_y`.
fn plot(s: &mut String, axes: &Axes, curve: &Curve, legend_y: f64) {
    let mut sorted = curve.lat.clone();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let mut points = String::new();
    for i in (0..n).step_by((n / 300).max(1)).chain([n - 1]) {
        let quantile = (i + 1) as f64 / n as f64;
        let _ = write!(points, "{:.1},{:.1} ", axes.x(sorted[i]), axes.y(quantile));
    }
    let dash = if curve.workers == 1 {
        r#" stroke-dasharray="6 4""#
    } else {
        ""
    };
    let color = color(&curve.label);
    let _ = writeln!(
        s,
        r#"<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{points}"/>"#
    );
    let x = LEFT + PLOT_W + 15.0;
    let _ = writeln!(
        s,
        r#"<line x1="{x}" y1="{legend_y:.1}" x2="{:.1}" y2="{legend_y:.1}" stroke="{color}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}">{}, {}w</text>"#,
        x + 25.0,
        x + 30.0,
        legend_y + 4.0,
        curve.label,
        curve.workers
    );
}

fn color(label: &str) -> &'static str {
    match label {
        "lock-core" => "#1f77b4",
        "lock-core/8-lockers" => "#17becf",
        "lock-core fair" => "#9467bd",
        "lock-core/8-lockers fair" => "#e377c2",
        "raw-fenced" => "#ff7f0e",
        "raw" => "#2ca02c",
        "rslock" => "#d62728",
        _ => "#7f7f7f",
    }
}
