//! A small SVG plot of a congestion-control run: per-flow throughput on top, switch
//! queue below, time along the bottom. No dependencies; any browser shows it.

use std::fmt::Write;

use super::cc::CcResult;

const W: f64 = 900.0;
const H: f64 = 260.0;
const LEFT: f64 = 70.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

fn panel(
    out: &mut String,
    y0: f64,
    title: &str,
    unit: &str,
    t_max: f64,
    v_max: f64,
    series: &[(String, Vec<(f64, f64)>)],
) {
    let _ = write!(out, r##"<g transform="translate(0,{y0})">"##);
    let _ = write!(
        out,
        r##"<text x="{LEFT}" y="16" font-size="14" font-family="sans-serif">{title}</text>"##
    );
    let (px, py, pw, ph) = (LEFT, 26.0, W - LEFT - 20.0, H - 60.0);
    let _ = write!(
        out,
        r##"<rect x="{px}" y="{py}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>"##
    );
    for i in 0..=4 {
        let v = v_max * f64::from(i) / 4.0;
        let y = py + ph - ph * f64::from(i) / 4.0;
        let _ = write!(
            out,
            r##"<text x="{}" y="{}" font-size="11" text-anchor="end" font-family="sans-serif">{v:.1} {unit}</text>"##,
            px - 4.0,
            y + 4.0
        );
        let _ = write!(
            out,
            r##"<line x1="{px}" x2="{}" y1="{y}" y2="{y}" stroke="#eee"/>"##,
            px + pw
        );
        let t = t_max * f64::from(i) / 4.0;
        let x = px + pw * f64::from(i) / 4.0;
        let _ = write!(
            out,
            r##"<text x="{x}" y="{}" font-size="11" text-anchor="middle" font-family="sans-serif">{:.1} ms</text>"##,
            py + ph + 14.0,
            t / 1000.0
        );
    }
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let mut d = String::new();
        for (k, (t, v)) in pts.iter().enumerate() {
            let x = px + pw * t / t_max.max(1e-9);
            let y = py + ph - ph * (v / v_max.max(1e-9)).min(1.0);
            let _ = write!(d, "{}{x:.1},{y:.1}", if k == 0 { "M" } else { " L" });
        }
        let _ = write!(
            out,
            r##"<path d="{d}" fill="none" stroke="{c}" stroke-width="1.3"/>"##
        );
        if series.len() > 1 {
            let _ = write!(
                out,
                r##"<text x="{}" y="{}" font-size="11" fill="{c}" font-family="sans-serif">{name}</text>"##,
                px + pw - 60.0,
                py + 14.0 + 13.0 * i as f64
            );
        }
    }
    out.push_str("</g>");
}

/// The plot of `r`.
pub fn svg(r: &CcResult, title: &str) -> String {
    let t_max = r.samples.last().map_or(1.0, |s| s.t_us);
    let n = r.samples.first().map_or(0, |s| s.rates_gbps.len());
    let rate_max = r
        .samples
        .iter()
        .flat_map(|s| s.rates_gbps.iter().copied())
        .fold(1.0, f64::max);
    let flows: Vec<(String, Vec<(f64, f64)>)> = (0..n)
        .map(|f| {
            (
                format!("flow {f}"),
                r.samples
                    .iter()
                    .map(|s| (s.t_us, s.rates_gbps[f]))
                    .collect(),
            )
        })
        .collect();
    let q_max = r
        .samples
        .iter()
        .map(|s| s.queue_bytes as f64 / 1000.0)
        .fold(1.0, f64::max);
    let queue = vec![(
        "queue".to_string(),
        r.samples
            .iter()
            .map(|s| (s.t_us, s.queue_bytes as f64 / 1000.0))
            .collect(),
    )];
    let mut out = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{}" viewBox="0 0 {W} {}"><rect width="100%" height="100%" fill="white"/>"##,
        2.0 * H + 30.0,
        2.0 * H + 30.0
    );
    let _ = write!(
        out,
        r##"<text x="{}" y="18" font-size="15" text-anchor="middle" font-family="sans-serif">{title}</text>"##,
        W / 2.0
    );
    panel(
        &mut out,
        24.0,
        "throughput per flow",
        "Gb/s",
        t_max,
        rate_max * 1.05,
        &flows,
    );
    panel(
        &mut out,
        24.0 + H,
        "switch queue",
        "KB",
        t_max,
        q_max * 1.05,
        &queue,
    );
    out.push_str("</svg>\n");
    out
}
