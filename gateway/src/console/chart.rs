//! Line charts as SVG, rendered on the server (the console runs no script): one or more series
//! over the same minutes, a y axis from 0 to a round maximum, a legend. Presentation attributes
//! only (no `style`), so the console's CSP needs nothing for them. Pure.

use super::pages::escape;

/// One line of a chart: a value per x position (`None`: no data there, the line breaks).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Series<'a> {
    pub(crate) name: &'a str,
    /// An SVG colour, e.g. `#2563eb`.
    pub(crate) color: &'a str,
    pub(crate) values: Vec<Option<f64>>,
}

const WIDTH: f64 = 420.0;
const HEIGHT: f64 = 170.0;
const LEFT: f64 = 48.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 26.0;
const BOTTOM: f64 = 22.0;

/// The smallest of 1, 2, 2.5, 5 × 10^n at or above `v` (1 for nothing to show).
pub(crate) fn round_up(v: f64) -> f64 {
    if !(v.is_finite() && v > 0.0) {
        return 1.0;
    }
    let mut magnitude = 10f64.powf(v.log10().floor());
    loop {
        for step in [1.0, 2.0, 2.5, 5.0] {
            if step * magnitude >= v * (1.0 - 1e-12) {
                return step * magnitude;
            }
        }
        magnitude *= 10.0;
    }
}

/// A number for an axis label: whole numbers plain, others with one or two decimals.
pub(crate) fn label(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The polyline segments of one series: consecutive known points, as `x,y x,y …`.
fn segments(values: &[Option<f64>], max: f64) -> Vec<String> {
    let n = values.len().max(2) as f64;
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let mut out = Vec::new();
    let mut current: Vec<String> = Vec::new();
    for (i, v) in values.iter().enumerate() {
        match v {
            Some(v) => {
                let x = LEFT + plot_w * (i as f64) / (n - 1.0);
                let y = TOP + plot_h * (1.0 - (v / max).clamp(0.0, 1.0));
                current.push(format!("{x:.1},{y:.1}"));
            }
            None if !current.is_empty() => out.push(std::mem::take(&mut current).join(" ")),
            None => {}
        }
    }
    if !current.is_empty() {
        out.push(current.join(" "));
    }
    out
}

/// An SVG line chart titled `title`, values in `unit`, x running from `x_from` to `x_to`
/// (labels under the axis).
pub(crate) fn line_chart(
    title: &str,
    unit: &str,
    series: &[Series<'_>],
    x_from: &str,
    x_to: &str,
) -> String {
    let highest = series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(0.0f64, |a, &b| a.max(b));
    let max = round_up(highest);
    let plot_h = HEIGHT - TOP - BOTTOM;
    let mut svg = format!(
        "<svg class=\"chart\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"100%\" role=\"img\" \
         aria-label=\"{t}\" xmlns=\"http://www.w3.org/2000/svg\"><title>{t}</title>\
         <text x=\"{LEFT}\" y=\"15\" font-size=\"13\" font-weight=\"600\" fill=\"#111827\">{t}</text>",
        t = escape(title)
    );
    // Legend, right-aligned in the title row.
    let mut x = WIDTH - RIGHT;
    for s in series.iter().rev() {
        let w = 14.0 + 7.0 * s.name.chars().count() as f64;
        x -= w;
        svg.push_str(&format!(
            "<rect x=\"{x:.1}\" y=\"6\" width=\"10\" height=\"10\" rx=\"2\" fill=\"{c}\"/>\
             <text x=\"{tx:.1}\" y=\"15\" font-size=\"11\" fill=\"#374151\">{n}</text>",
            c = escape(s.color),
            tx = x + 13.0,
            n = escape(s.name)
        ));
        x -= 8.0;
    }
    for (frac, value) in [(0.0, 0.0), (0.5, max / 2.0), (1.0, max)] {
        let y = TOP + plot_h * (1.0 - frac);
        svg.push_str(&format!(
            "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{x2}\" y2=\"{y:.1}\" stroke=\"#e5e7eb\"/>\
             <text x=\"{lx}\" y=\"{ty:.1}\" font-size=\"11\" text-anchor=\"end\" fill=\"#6b7280\">{v}</text>",
            x2 = WIDTH - RIGHT,
            lx = LEFT - 6.0,
            ty = y + 4.0,
            v = escape(&format!("{}{unit}", label(value)))
        ));
    }
    svg.push_str(&format!(
        "<text x=\"{LEFT}\" y=\"{y}\" font-size=\"11\" fill=\"#6b7280\">{from}</text>\
         <text x=\"{xr}\" y=\"{y}\" font-size=\"11\" text-anchor=\"end\" fill=\"#6b7280\">{to}</text>",
        y = HEIGHT - 6.0,
        xr = WIDTH - RIGHT,
        from = escape(x_from),
        to = escape(x_to)
    ));
    for s in series {
        for points in segments(&s.values, max) {
            if points.contains(' ') {
                svg.push_str(&format!(
                    "<polyline points=\"{points}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" \
                     stroke-linejoin=\"round\"/>",
                    escape(s.color)
                ));
            } else if let Some((cx, cy)) = points.split_once(',') {
                // A single point: a dot, or it would not show.
                svg.push_str(&format!(
                    "<circle cx=\"{cx}\" cy=\"{cy}\" r=\"2\" fill=\"{}\"/>",
                    escape(s.color)
                ));
            }
        }
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_maxima_are_round() {
        assert_eq!(round_up(0.0), 1.0);
        assert_eq!(round_up(f64::NAN), 1.0);
        assert_eq!(round_up(1.0), 1.0);
        assert_eq!(round_up(3.0), 5.0);
        assert_eq!(round_up(7.0), 10.0);
        assert_eq!(round_up(12.0), 20.0);
        assert_eq!(round_up(240.0), 250.0);
        assert_eq!(round_up(0.03), 0.05);
        assert_eq!(label(2.5), "2.5");
        assert_eq!(label(250.0), "250");
        assert_eq!(label(0.05), "0.05");
    }

    #[test]
    fn gaps_split_lines_and_values_map_into_the_plot() {
        let segs = segments(&[Some(0.0), Some(10.0), None, Some(5.0)], 10.0);
        assert_eq!(segs.len(), 2);
        // x from LEFT to WIDTH-RIGHT, y from the bottom (0) to the top (max).
        assert_eq!(
            segs[0],
            format!(
                "{LEFT:.1},{:.1} {:.1},{TOP:.1}",
                HEIGHT - BOTTOM,
                LEFT + (WIDTH - LEFT - RIGHT) / 3.0
            )
        );
        assert!(segments(&[None, None], 1.0).is_empty());
    }

    #[test]
    fn chart_is_escaped_svg_with_a_line_per_series() {
        let svg = line_chart(
            "Requests <per minute>",
            "",
            &[
                Series {
                    name: "requests",
                    color: "#2563eb",
                    values: vec![Some(1.0), Some(3.0)],
                },
                Series {
                    name: "5xx",
                    color: "#dc2626",
                    values: vec![None, Some(1.0)],
                },
            ],
            "-60 min",
            "now",
        );
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains("Requests &lt;per minute&gt;"));
        assert!(!svg.contains("<per"));
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert_eq!(svg.matches("<circle").count(), 1, "a lone point is a dot");
        assert!(svg.contains(">5</text>"), "axis up to 5: {svg}");
        assert!(!svg.contains("style="), "no inline styles under the CSP");
    }
}
