//! Report pictures: small SVG charts for the lab's Markdown reports (plotters, SVG backend).
//!
//! Pure functions from numbers to SVG text; callers write the files.

use anyhow::{anyhow, Result};
use plotters::prelude::*;

/// One bar of a bar chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// The label under the bar.
    pub label: String,
    /// Its value (same unit for all bars, named in the chart title).
    pub value: f64,
}

/// A horizontal bar chart as SVG text.
pub fn bar_chart_svg(title: &str, bars: &[Bar]) -> Result<String> {
    let mut svg = String::new();
    {
        let height = 90 + 50 * bars.len() as u32;
        let root = SVGBackend::with_string(&mut svg, (820, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("chart: {e}"))?;
        let max = bars
            .iter()
            .map(|b| b.value)
            .fold(0.0f64, f64::max)
            .max(1e-9)
            * 1.15;
        let n = bars.len() as i32;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(240)
            .build_cartesian_2d(0.0..max, (0..n).into_segmented())
            .map_err(|e| anyhow!("chart: {e}"))?;
        let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(bars.len())
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .draw()
            .map_err(|e| anyhow!("chart: {e}"))?;
        chart
            .draw_series(bars.iter().enumerate().map(|(i, b)| {
                let i = i as i32;
                let color = Palette99::pick(i as usize).filled();
                let mut r = Rectangle::new(
                    [
                        (0.0, SegmentValue::Exact(i)),
                        (b.value, SegmentValue::Exact(i + 1)),
                    ],
                    color,
                );
                r.set_margin(8, 8, 0, 0);
                r
            }))
            .map_err(|e| anyhow!("chart: {e}"))?;
        chart
            .draw_series(bars.iter().enumerate().map(|(i, b)| {
                Text::new(
                    format!("{:.2}", b.value),
                    (b.value, SegmentValue::CenterOf(i as i32)),
                    ("sans-serif", 14),
                )
            }))
            .map_err(|e| anyhow!("chart: {e}"))?;
        root.present().map_err(|e| anyhow!("chart: {e}"))?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_names_every_bar_and_value() {
        let svg = bar_chart_svg(
            "Download time (s)",
            &[
                Bar {
                    label: "LAN".into(),
                    value: 0.25,
                },
                Bar {
                    label: "US–Asia".into(),
                    value: 31.5,
                },
            ],
        )
        .unwrap();
        assert!(svg.starts_with("<svg"));
        for s in ["Download time (s)", "LAN", "US–Asia", "31.50", "0.25"] {
            assert!(svg.contains(s), "missing {s}");
        }
    }
}
