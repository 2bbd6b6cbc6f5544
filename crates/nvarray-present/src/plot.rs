//! Charts of simulation results, written as SVG or PNG files.
//!
//! This module owns turning already-computed series into an image file; it never runs a
//! simulation and never decides what to plot. Input comes from result files and the command
//! line, so odd data (a single point, all-equal values, NaN, zero on a log axis) must produce a
//! readable chart or an error, never a panic.

use std::path::Path;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

/// Why a chart was not written. The messages name the file and say what to do.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    #[error(
        "cannot write chart to {path}: unknown image format; use a file name ending in .svg or .png"
    )]
    UnknownFormat { path: String },
    /// A line chart could not be drawn or written: most often a missing directory, or no
    /// font for its text.
    #[error(
        "cannot write chart to {path}; check that its directory exists and is writable, \
         and that fontconfig finds a sans-serif font (e.g. package fonts-dejavu-core)"
    )]
    Chart { path: String, source: DrawError },
    /// A bar chart could not be drawn or written.
    #[error("cannot write chart to {path}")]
    Bars { path: String, source: DrawError },
}

/// What plotters said when drawing or writing failed (its backends' errors differ in type).
pub type DrawError = Box<dyn std::error::Error + Send + Sync>;

/// One line on a chart.
pub struct Series {
    /// Legend text for this line.
    pub label: String,
    /// Points as (x, y), joined in the order given. Points that cannot be drawn (NaN,
    /// infinite, or beyond 1e100 in magnitude; below 1e-100 on a log axis) are skipped and
    /// counted in a note in the title.
    pub points: Vec<(f64, f64)>,
}

/// Chart description.
pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// Log-scale x axis; ignored (with a note in the title) when some x value is <= 0.
    pub log_x: bool,
    /// Log-scale y axis; ignored (with a note in the title) when some y value is <= 0.
    pub log_y: bool,
    pub series: &'a [Series],
    /// Optional reference points drawn as distinct markers (e.g. published figures from a
    /// paper), with their own legend label.
    pub reference: Option<&'a Series>,
    /// The first series is a guide line (such as fitted = measured) and the others are
    /// points not joined, each one marked (measured against fitted, one point per job).
    pub guide_then_points: bool,
}

/// Image size for both formats; PNG is 1024x640 so it reads well in a terminal image viewer
/// and in a README, and SVG uses the same size so the two layouts match.
const IMAGE_SIZE_PX: (u32, u32) = (1024, 640);

/// A dense series gets at most this many markers; its line still passes through every point.
/// Without the bound a series of thousands of points draws a solid smear of circles that hides
/// the line and the other series.
const MARKERS_PER_SERIES_MAX: usize = 100;

/// The Tableau 10 palette: ten colours that stay distinct for most colour-blind readers.
/// Black is left out on purpose because reference points are drawn in black.
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

const MARKER_RADIUS_PX: i32 = 4;

const REFERENCE_COLOR: RGBColor = RGBColor(0, 0, 0);

/// Checks that `path` names a chart format `write_chart` can write (by its extension), so a
/// command can refuse a wrong name before the work whose chart it is.
pub fn check_chart_path(path: &Path) -> Result<(), ChartError> {
    ImageFormat::from_path(path).map(|_| ())
}

/// Writes the chart to `path`; the format follows the extension: `.svg` (SVGBackend) or `.png`
/// (BitMapBackend, 1024x640). Any other extension is an error that names the accepted ones.
pub fn write_chart(path: &Path, chart: &Chart) -> Result<(), ChartError> {
    let format = ImageFormat::from_path(path)?;
    let layout = Layout::new(chart);
    let written = match format {
        ImageFormat::Svg => {
            let root = SVGBackend::new(path, IMAGE_SIZE_PX).into_drawing_area();
            render(&root, chart, &layout)
                .and_then(|()| root.present())
                .map_err(DrawError::from)
        }
        ImageFormat::Png => {
            let root = BitMapBackend::new(path, IMAGE_SIZE_PX).into_drawing_area();
            render(&root, chart, &layout)
                .and_then(|()| root.present())
                .map_err(DrawError::from)
        }
    };
    written.map_err(|source| ChartError::Chart {
        path: path.display().to_string(),
        source,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ImageFormat {
    Svg,
    Png,
}

impl ImageFormat {
    fn from_path(path: &Path) -> Result<ImageFormat, ChartError> {
        let extension = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match extension.as_deref() {
            Some("svg") => Ok(ImageFormat::Svg),
            Some("png") => Ok(ImageFormat::Png),
            _ => Err(ChartError::UnknownFormat {
                path: path.display().to_string(),
            }),
        }
    }
}

/// Values beyond this magnitude are left out of the chart. Plotters derives tick positions
/// from an axis's span (linear) or ratio (log) and loops without end once that overflows f64,
/// so this bound keeps every span and ratio finite, margins included. No quantity a storage
/// simulator reports comes near it.
const VALUE_ABS_MAX: f64 = 1e100;

/// The smallest value a log axis shows, for the same reason as `VALUE_ABS_MAX`.
const VALUE_LOG_MIN: f64 = 1e-100;

/// Everything about the chart that is computed from the data before any drawing starts.
struct Layout {
    title: String,
    x: AxisRange,
    y: AxisRange,
}

impl Layout {
    fn new(chart: &Chart) -> Layout {
        let all_points = || {
            chart
                .series
                .iter()
                .chain(chart.reference)
                .flat_map(|s| s.points.iter().copied())
        };
        let finite_points = || all_points().filter(|(x, y)| x.is_finite() && y.is_finite());
        // A log axis cannot show zero or negative values; falling back to linear keeps every
        // point on the chart, and the title says so below.
        let x_log = chart.log_x && finite_points().all(|(x, _)| x > 0.0);
        let y_log = chart.log_y && finite_points().all(|(_, y)| y > 0.0);
        let plotted =
            || all_points().filter(move |&(x, y)| is_plottable(x, x_log) && is_plottable(y, y_log));
        let x = AxisRange::new(plotted().map(|(x, _)| x), x_log);
        let y = AxisRange::new(plotted().map(|(_, y)| y), y_log);

        // The reader must be told when a requested log axis was not honoured, or they will
        // misread the slope of every line, and when points are missing, or they will trust a
        // chart of partial data; the title is the one place they always look.
        let mut notes = Vec::new();
        let linear_axes: Vec<&str> = [(chart.log_x, x_log, "x"), (chart.log_y, y_log, "y")]
            .iter()
            .filter(|(requested, honoured, _)| *requested && !*honoured)
            .map(|(_, _, name)| *name)
            .collect();
        if !linear_axes.is_empty() {
            notes.push(format!(
                "{} axis linear: data has values <= 0",
                linear_axes.join(", ")
            ));
        }
        let omitted_count = all_points().count() - plotted().count();
        if omitted_count > 0 {
            let noun = if omitted_count == 1 {
                "point"
            } else {
                "points"
            };
            notes.push(format!(
                "{omitted_count} {noun} omitted: not finite or out of plottable range"
            ));
        }
        let mut title = chart.title.to_string();
        if !notes.is_empty() {
            title.push_str(&format!(" [{}]", notes.join("; ")));
        }
        Layout { title, x, y }
    }

    /// The points of one series that this chart can draw, in their original order.
    fn points<'p>(&'p self, points: &'p [(f64, f64)]) -> impl Iterator<Item = (f64, f64)> + 'p {
        points
            .iter()
            .copied()
            .filter(|&(x, y)| is_plottable(x, self.x.log) && is_plottable(y, self.y.log))
    }
}

fn is_plottable(value: f64, log: bool) -> bool {
    let in_bounds = value.is_finite() && value.abs() <= VALUE_ABS_MAX;
    in_bounds && (!log || value >= VALUE_LOG_MIN)
}

/// The visible range of one axis. Invariants: `lo_value < hi_value`, both finite, and
/// `lo_value > 0` when `log`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct AxisRange {
    lo_value: f64,
    hi_value: f64,
    log: bool,
}

impl AxisRange {
    /// Fraction of the data span added on each side so markers do not sit on the frame.
    const MARGIN_FRACTION: f64 = 0.05;

    /// Builds the range for `values`, which must all be plottable on this kind of axis
    /// (`is_plottable`); other values are ignored so the invariants hold whatever comes in.
    fn new(values: impl Iterator<Item = f64>, log: bool) -> AxisRange {
        let mut min_value = f64::INFINITY;
        let mut max_value = f64::NEG_INFINITY;
        for v in values.filter(|v| is_plottable(*v, log)) {
            min_value = min_value.min(v);
            max_value = max_value.max(v);
        }
        let range = if min_value > max_value {
            None
        } else if log {
            Self::padded_log(min_value, max_value)
        } else {
            Self::padded_linear(min_value, max_value)
        };
        // A padded range holds every value: none is drawn outside the frame.
        debug_assert!(
            range.is_none_or(|(lo, _)| lo <= min_value),
            "axis from {range:?} leaves out {min_value}"
        );
        debug_assert!(
            range.is_none_or(|(_, hi)| hi >= max_value),
            "axis to {range:?} leaves out {max_value}"
        );
        // With no data at all an empty frame with a plain range is better than no chart.
        let (lo_value, hi_value) = range.unwrap_or(if log { (1.0, 10.0) } else { (0.0, 1.0) });
        let result = AxisRange {
            lo_value,
            hi_value,
            log,
        };
        debug_assert!(result.lo_value < result.hi_value);
        debug_assert!(!result.log || result.lo_value > 0.0);
        result
    }

    /// Whether tick labels should use exponent form. The choice is made once per axis so that
    /// neighbouring labels never mix `90000` and `1e5`; IOPS and byte axes reach 1e6 and
    /// more, where plain digits are hard to count.
    fn wants_exponent(&self) -> bool {
        let magnitude_max = self.lo_value.abs().max(self.hi_value.abs());
        let magnitude_min = if self.log {
            self.lo_value
        } else {
            magnitude_max
        };
        magnitude_max >= 1e6 || magnitude_min < 1e-3
    }

    fn padded_linear(min_value: f64, max_value: f64) -> Option<(f64, f64)> {
        debug_assert!(min_value <= max_value, "{min_value} > {max_value}");
        let span = max_value - min_value;
        let magnitude = min_value.abs().max(max_value.abs());
        // Plottable values only (`is_plottable`): the span and the pads stay finite.
        debug_assert!(magnitude <= VALUE_ABS_MAX, "{min_value} to {max_value}");
        // A span this small relative to the values is rounding noise; treating it as a single
        // value gives readable ticks instead of sixteen-digit labels.
        let pad = if span > magnitude * 1e-12 {
            span * Self::MARGIN_FRACTION
        } else {
            (magnitude * 0.1).max(1.0)
        };
        let lo_value = Some(min_value - pad)
            .filter(|v| v.is_finite())
            .unwrap_or(min_value);
        let hi_value = Some(max_value + pad)
            .filter(|v| v.is_finite())
            .unwrap_or(max_value);
        Some((lo_value, hi_value)).filter(|(lo, hi)| lo < hi)
    }

    fn padded_log(min_value: f64, max_value: f64) -> Option<(f64, f64)> {
        debug_assert!(min_value <= max_value, "{min_value} > {max_value}");
        // Plottable on a log axis only (`is_plottable`): every logarithm is finite.
        debug_assert!(min_value >= VALUE_LOG_MIN, "{min_value} on a log axis");
        let lo_exponent = min_value.log10();
        let hi_exponent = max_value.log10();
        let span = hi_exponent - lo_exponent;
        // One value (or a ratio indistinguishable from 1) gets a factor of two either side.
        let pad = if span > 1e-9 {
            span * Self::MARGIN_FRACTION
        } else {
            std::f64::consts::LOG10_2
        };
        let (mut lo_exponent, mut hi_exponent) = (lo_exponent - pad, hi_exponent + pad);
        // Plotters labels a log axis only at powers of ten, so a range narrower than two
        // decades may show one label or none; widening it to whole decades shows at least two.
        if hi_exponent - lo_exponent < 2.0 {
            lo_exponent = lo_exponent.floor();
            hi_exponent = hi_exponent.ceil();
        }
        let lo_value = Some(10f64.powf(lo_exponent))
            .filter(|v| v.is_finite() && *v > 0.0)
            .unwrap_or(min_value);
        let hi_value = Some(10f64.powf(hi_exponent))
            .filter(|v| v.is_finite())
            .unwrap_or(max_value);
        Some((lo_value, hi_value)).filter(|(lo, hi)| lo < hi && *lo > 0.0)
    }
}

/// Series past the palette get hues spaced by the golden ratio, so every series on the chart
/// keeps a colour of its own however many there are.
fn series_color(index: usize) -> RGBAColor {
    match PALETTE.get(index) {
        Some(color) => color.to_rgba(),
        None => {
            let hue = ((index - PALETTE.len()) as f64 * 0.618_033_988_75 + 0.1).fract();
            // Alternating dark and light tones keeps neighbours apart and away from the
            // palette's mid tones when a hue lands near one of them.
            let lightness = [0.3, 0.6][index % 2];
            HSLColor(hue, 0.7, lightness).to_rgba()
        }
    }
}

/// Draws onto a backend-agnostic area; the four arms exist because plotters gives linear and
/// log axes different coordinate types, so the choice must be made at compile time.
fn render<DB>(
    root: &DrawingArea<DB, Shift>,
    chart: &Chart,
    layout: &Layout,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend,
{
    root.fill(&WHITE)?;
    let x_range = layout.x.lo_value..layout.x.hi_value;
    let y_range = layout.y.lo_value..layout.y.hi_value;
    match (layout.x.log, layout.y.log) {
        (false, false) => draw(root, chart, layout, x_range, y_range),
        (true, false) => draw(root, chart, layout, x_range.log_scale(), y_range),
        (false, true) => draw(root, chart, layout, x_range, y_range.log_scale()),
        (true, true) => draw(
            root,
            chart,
            layout,
            x_range.log_scale(),
            y_range.log_scale(),
        ),
    }
}

fn draw<DB, X, Y>(
    root: &DrawingArea<DB, Shift>,
    chart: &Chart,
    layout: &Layout,
    x_spec: X,
    y_spec: Y,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut context = ChartBuilder::on(root)
        .caption(&layout.title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d(x_spec, y_spec)?;

    context
        .configure_mesh()
        .x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .x_label_formatter(&|v| format_tick(*v, layout.x.wants_exponent()))
        .y_label_formatter(&|v| format_tick(*v, layout.y.wants_exponent()))
        .light_line_style(RGBColor(235, 235, 235))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .draw()?;

    draw_all_series(&mut context, chart, layout)?;
    draw_reference(&mut context, chart, layout)?;

    if !chart.series.is_empty() || chart.reference.is_some() {
        context
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 14))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    Ok(())
}

/// Draws the chart's series: each a line with at most `MARKERS_PER_SERIES_MAX` markers, or,
/// after a guide line, marked points not joined.
fn draw_all_series<'a, DB, X, Y>(
    context: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    chart: &Chart,
    layout: &Layout,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (index, series) in chart.series.iter().enumerate() {
        let color = series_color(index);
        let line_style = color.stroke_width(2);
        let marker_style = color.filled();

        if chart.guide_then_points && index > 0 {
            context
                .draw_series(
                    layout
                        .points(&series.points)
                        .map(|p| Circle::new(p, MARKER_RADIUS_PX, marker_style)),
                )?
                .label(series.label.as_str())
                .legend(move |(x, y)| Circle::new((x + 10, y), MARKER_RADIUS_PX, marker_style));
            continue;
        }
        context
            .draw_series(LineSeries::new(layout.points(&series.points), line_style))?
            .label(series.label.as_str())
            .legend(move |(x, y)| {
                EmptyElement::at((x, y))
                    + PathElement::new(vec![(0, 0), (20, 0)], line_style)
                    + Circle::new((10, 0), MARKER_RADIUS_PX, marker_style)
            });

        let point_count = layout.points(&series.points).count();
        let stride = point_count.div_ceil(MARKERS_PER_SERIES_MAX).max(1);
        context.draw_series(
            layout
                .points(&series.points)
                .step_by(stride)
                .map(|p| Circle::new(p, MARKER_RADIUS_PX, marker_style)),
        )?;
    }
    Ok(())
}

/// Draws the reference points, if the chart has any, as crosses with their legend entry.
fn draw_reference<'a, DB, X, Y>(
    context: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    chart: &Chart,
    layout: &Layout,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    if let Some(reference) = chart.reference {
        // Reference figures are few and each one matters, so every point gets a marker, and
        // no line joins them because published points need not lie on one curve.
        let style = REFERENCE_COLOR.stroke_width(2);
        context
            .draw_series(
                layout
                    .points(&reference.points)
                    .map(|p| Cross::new(p, 6, style)),
            )?
            .label(reference.label.as_str())
            .legend(move |(x, y)| Cross::new((x + 10, y), 6, style));
    }
    Ok(())
}

/// A bar chart: one group of bars per category, side by side or stacked.
pub struct Bars<'a> {
    pub title: &'a str,
    pub y_label: &'a str,
    pub log_y: bool,
    /// One label per position on the x axis.
    pub categories: &'a [String],
    /// (legend label, one value per category). A value that cannot be drawn (not finite,
    /// negative, or not above 0 on a log axis) leaves its bar out.
    pub groups: &'a [(String, Vec<f64>)],
    /// Stack each category's values instead of setting them side by side.
    pub stacked: bool,
}

/// Writes the bar chart to `path` (`.svg` or `.png`), like `write_chart`.
pub fn write_bars(path: &Path, bars: &Bars) -> Result<(), ChartError> {
    let written = match ImageFormat::from_path(path)? {
        ImageFormat::Svg => {
            let root = SVGBackend::new(path, IMAGE_SIZE_PX).into_drawing_area();
            render_bars(&root, bars)
                .and_then(|()| root.present())
                .map_err(DrawError::from)
        }
        ImageFormat::Png => {
            let root = BitMapBackend::new(path, IMAGE_SIZE_PX).into_drawing_area();
            render_bars(&root, bars)
                .and_then(|()| root.present())
                .map_err(DrawError::from)
        }
    };
    written.map_err(|source| ChartError::Bars {
        path: path.display().to_string(),
        source,
    })
}

/// The drawable part of each bar: (category, group, bottom, top).
fn bar_spans(bars: &Bars, log: bool) -> Vec<(usize, usize, f64, f64)> {
    let mut spans = Vec::new();
    for c in 0..bars.categories.len() {
        let mut base = 0.0;
        for (g, (_, values)) in bars.groups.iter().enumerate() {
            let Some(&v) = values.get(c) else { continue };
            if !is_plottable(v, log) || v < 0.0 {
                continue;
            }
            if bars.stacked {
                spans.push((c, g, base, base + v));
                base += v;
            } else {
                spans.push((c, g, 0.0, v));
            }
        }
    }
    spans
}

fn render_bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    bars: &Bars,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let spans = bar_spans(bars, bars.log_y);
    let n = bars.categories.len().max(1);
    let groups = bars.groups.len().max(1);
    let x_range = -0.5..(n as f64 - 0.5);
    let tops = || spans.iter().map(|s| s.3);
    // Headroom above the tallest bar holds the legend (a third of the height).
    if bars.log_y {
        let y = AxisRange::new(tops(), true);
        let (lo, hi) = (y.lo_value, y.hi_value * (y.hi_value / y.lo_value).powf(0.5));
        draw_bars(
            root,
            bars,
            &spans,
            groups,
            x_range,
            (lo..hi).log_scale(),
            lo,
            y,
        )
    } else {
        let top = tops().fold(0.0, f64::max);
        let hi = if top > 0.0 { top * 1.5 } else { 1.0 };
        let y = AxisRange::new([0.0, hi].into_iter(), false);
        draw_bars(root, bars, &spans, groups, x_range, 0.0..hi, 0.0, y)
    }
}

#[allow(clippy::too_many_arguments)]
fn draw_bars<DB, Y>(
    root: &DrawingArea<DB, Shift>,
    bars: &Bars,
    spans: &[(usize, usize, f64, f64)],
    groups: usize,
    x_range: std::ops::Range<f64>,
    y_spec: Y,
    floor: f64,
    y: AxisRange,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut context = ChartBuilder::on(root)
        .caption(bars.title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(150)
        .y_label_area_size(80)
        .build_cartesian_2d(x_range, y_spec)?;
    let categories = bars.categories;
    context
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc(bars.y_label)
        .y_label_formatter(&|v| format_tick(*v, y.wants_exponent()))
        .light_line_style(RGBColor(235, 235, 235))
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 15))
        .draw()?;
    draw_category_labels(root, &context, categories, y.lo_value.max(floor))?;
    draw_bar_groups(&mut context, bars, spans, groups, floor)?;
    if !bars.groups.is_empty() {
        context
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font(("sans-serif", 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    Ok(())
}

/// Writes each category's name downwards from just under its bar, at height `label_y`.
fn draw_category_labels<'a, DB, Y>(
    root: &DrawingArea<DB, Shift>,
    context: &ChartContext<'a, DB, Cartesian2d<RangedCoordf64, Y>>,
    categories: &[String],
    label_y: f64,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend + 'a,
    Y: Ranged<ValueType = f64>,
{
    // Category names read downwards from just under their bar (plotters centres rotated tick
    // labels on the tick, which hides their beginning under the axis).
    let label_style = ("sans-serif", 12)
        .into_font()
        .transform(FontTransform::Rotate90)
        .into_text_style(root)
        .pos(plotters::style::text_anchor::Pos::new(
            plotters::style::text_anchor::HPos::Left,
            plotters::style::text_anchor::VPos::Center,
        ));
    for (i, name) in categories.iter().enumerate() {
        let (px, py) = context.plotting_area().map_coordinate(&(i as f64, label_y));
        root.draw(&Text::new(name.clone(), (px, py + 8), label_style.clone()))?;
    }
    Ok(())
}

/// Draws one series of rectangles per group (side by side within a category, or stacked),
/// each with its legend entry; no bar reaches below `floor`.
fn draw_bar_groups<'a, DB, Y>(
    context: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, Y>>,
    bars: &Bars,
    spans: &[(usize, usize, f64, f64)],
    groups: usize,
    floor: f64,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend + 'a,
    Y: Ranged<ValueType = f64>,
{
    let width = 0.8;
    for (g, (label, _)) in bars.groups.iter().enumerate() {
        let color = series_color(g);
        let rects = spans
            .iter()
            .filter(|s| s.1 == g)
            .map(|&(c, _, bottom, top)| {
                let (left, right) = if bars.stacked {
                    (c as f64 - width / 2.0, c as f64 + width / 2.0)
                } else {
                    let w = width / groups as f64;
                    let left = c as f64 - width / 2.0 + g as f64 * w;
                    (left, left + w)
                };
                Rectangle::new([(left, bottom.max(floor)), (right, top)], color.filled())
            });
        context
            .draw_series(rects)?
            .label(label.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
    }
    Ok(())
}

/// Tick labels with at most six significant digits, in exponent form when `use_exponent`.
fn format_tick(value: f64, use_exponent: bool) -> String {
    // Round-tripping through six significant digits removes float noise such as
    // 0.30000000000000004 that linear tick steps accumulate.
    let rounded: f64 = format!("{value:.5e}").parse().unwrap_or(value);
    if rounded == 0.0 {
        "0".to_string()
    } else if use_exponent {
        format!("{rounded:e}")
    } else {
        format!("{rounded}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A path in the system temp dir that no other test or concurrent run uses.
    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("nvarray-plot-{}-{name}", std::process::id()))
    }

    fn new_series(label: &str, points: Vec<(f64, f64)>) -> Series {
        Series {
            label: label.to_string(),
            points,
        }
    }

    fn sample_series() -> Vec<Series> {
        let curve = |scale: f64| {
            (1..=2000)
                .map(|i| {
                    let load = f64::from(i) * 50.0;
                    (load, scale * (1.0 + 1.0 / (1.0 - load / 110_000.0)))
                })
                .collect()
        };
        vec![
            new_series("PCM & RAID-0 <4 devices>", curve(150.0)),
            new_series("STT-MRAM", curve(40.0)),
            new_series("NAND flash", curve(25_000.0)),
        ]
    }

    fn sample_chart<'a>(series: &'a [Series], reference: Option<&'a Series>) -> Chart<'a> {
        Chart {
            title: "Latency vs offered load",
            x_label: "offered load (IOPS)",
            y_label: "mean latency (ns)",
            log_x: true,
            log_y: true,
            series,
            reference,
            guide_then_points: false,
        }
    }

    #[test]
    fn bar_charts_draw_every_group_and_category_and_skip_what_cannot_be_drawn() {
        let categories: Vec<String> = ["TLC firmware", "MRAM firmware"].map(String::from).to_vec();
        let groups = vec![
            ("media".to_string(), vec![0.97, 0.02]),
            ("controller".to_string(), vec![0.02, f64::NAN]),
        ];
        for (stacked, log_y) in [(true, false), (false, true)] {
            let path = temp_path(&format!("bars-{stacked}-{log_y}.svg"));
            let bars = Bars {
                title: "decomposition",
                y_label: "share",
                log_y,
                categories: &categories,
                groups: &groups,
                stacked,
            };
            write_bars(&path, &bars).unwrap();
            let svg = std::fs::read_to_string(&path).unwrap();
            std::fs::remove_file(&path).unwrap();
            for text in [
                "decomposition",
                "share",
                "media",
                "controller",
                "MRAM firmware",
            ] {
                assert!(svg.contains(text), "{text} missing");
            }
            // The NaN bar is left out: three bars, one per drawable value.
            assert_eq!(bar_spans(&bars, log_y).len(), 3);
        }
        let png = temp_path("bars.png");
        let none: Vec<String> = vec![];
        write_bars(
            &png,
            &Bars {
                title: "empty",
                y_label: "x",
                log_y: true,
                categories: &none,
                groups: &[],
                stacked: false,
            },
        )
        .unwrap();
        assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
        std::fs::remove_file(&png).unwrap();
    }

    #[test]
    fn svg_contains_title_and_every_label() {
        let series = sample_series();
        let reference = series_reference();
        let path = temp_path("labels.svg");
        write_chart(&path, &sample_chart(&series, Some(&reference))).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();

        assert!(svg.contains("Latency vs offered load"));
        assert!(svg.contains("offered load (IOPS)"));
        assert!(svg.contains("mean latency (ns)"));
        // The SVG backend escapes markup characters, so the first label appears escaped.
        assert!(svg.contains("PCM &amp; RAID-0 &lt;4 devices&gt;"));
        for s in &series[1..] {
            assert!(svg.contains(&s.label), "missing label {}", s.label);
        }
        assert!(svg.contains("Moneta (MICRO&apos;10)"));
    }

    fn series_reference() -> Series {
        new_series(
            "Moneta (MICRO'10)",
            vec![(1_000.0, 400.0), (10_000.0, 420.0), (100_000.0, 3_000.0)],
        )
    }

    #[test]
    fn png_has_magic_bytes_and_real_content() {
        let series = sample_series();
        let reference = series_reference();
        let path = temp_path("chart.png");
        write_chart(&path, &sample_chart(&series, Some(&reference))).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();

        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
        assert!(bytes.len() > 8 * 1024, "PNG is only {} bytes", bytes.len());
    }

    #[test]
    fn png_text_is_rendered() {
        // An empty frame with and without a title must differ; if fonts silently failed to
        // load, both images would be identical.
        let with_title = temp_path("title.png");
        let without_title = temp_path("no-title.png");
        let chart = |title| Chart {
            title,
            x_label: "",
            y_label: "",
            log_x: false,
            log_y: false,
            series: &[],
            reference: None,
            guide_then_points: false,
        };
        write_chart(&with_title, &chart("A long title that must be drawn")).unwrap();
        write_chart(&without_title, &chart("")).unwrap();
        let a = std::fs::read(&with_title).unwrap();
        let b = std::fs::read(&without_title).unwrap();
        std::fs::remove_file(&with_title).unwrap();
        std::fs::remove_file(&without_title).unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn unknown_extension_is_an_error() {
        let series = sample_series();
        for name in ["chart.jpg", "chart", "chart.svg.txt"] {
            let path = temp_path(name);
            let error = write_chart(&path, &sample_chart(&series, None)).unwrap_err();
            let message = format!("{error:#}");
            assert!(message.contains(".svg"), "{message}");
            assert!(message.contains(".png"), "{message}");
            assert!(message.contains(name), "{message}");
            assert!(!path.exists());
        }
    }

    #[test]
    fn uppercase_extension_is_accepted() {
        assert_eq!(
            ImageFormat::from_path(Path::new("a/b.SVG")).unwrap(),
            ImageFormat::Svg
        );
        assert_eq!(
            ImageFormat::from_path(Path::new("b.Png")).unwrap(),
            ImageFormat::Png
        );
    }

    #[test]
    fn missing_directory_error_names_the_file() {
        let path = temp_path("no-such-dir").join("chart.svg");
        let series = sample_series();
        let error = write_chart(&path, &sample_chart(&series, None)).unwrap_err();
        assert!(format!("{error:#}").contains(&path.display().to_string()));
    }

    #[test]
    fn odd_data_does_not_panic() {
        // Each case is (name, points, log_x, log_y).
        type Case = (&'static str, Vec<(f64, f64)>, bool, bool);
        let cases: Vec<Case> = vec![
            ("one-point-log-zero", vec![(0.0, 5.0)], true, true),
            ("one-point", vec![(3.0, 3.0)], false, false),
            ("one-point-log", vec![(3.0, 3.0)], true, true),
            ("empty", vec![], true, false),
            ("negative-log", vec![(-1.0, -5.0), (2.0, 7.0)], true, true),
            (
                "all-equal",
                vec![(1.0, 2.0), (1.0, 2.0), (1.0, 2.0)],
                false,
                true,
            ),
            (
                "nan-inf",
                vec![(f64::NAN, 1.0), (1.0, f64::INFINITY), (2.0, 3.0)],
                true,
                true,
            ),
            (
                "huge",
                vec![(f64::MAX, f64::MAX), (-f64::MAX, f64::MIN_POSITIVE)],
                false,
                true,
            ),
            ("max-only", vec![(f64::MAX, f64::MAX)], true, true),
            ("tiny", vec![(5e-324, 5e-324)], true, true),
            (
                "near-equal",
                vec![(1.0, 1.0), (1.0 + f64::EPSILON, 1.0 + f64::EPSILON)],
                false,
                false,
            ),
            (
                "many-decades",
                vec![(1e-300, 1e-300), (1e300, 1e300)],
                true,
                true,
            ),
            (
                "denormal",
                vec![(5e-324, 5e-324), (1e-323, 1e-323)],
                false,
                false,
            ),
        ];
        for (name, points, log_x, log_y) in cases {
            let series = [new_series(name, points)];
            let chart = Chart {
                title: name,
                x_label: "x",
                y_label: "y",
                log_x,
                log_y,
                series: &series,
                reference: None,
                guide_then_points: false,
            };
            for extension in ["svg", "png"] {
                let path = temp_path(&format!("odd-{name}.{extension}"));
                write_chart(&path, &chart).unwrap();
                std::fs::remove_file(&path).unwrap();
            }
        }
    }

    #[test]
    fn log_fallback_is_noted_in_title() {
        let series = [new_series("s", vec![(0.0, 1.0), (10.0, 100.0)])];
        let chart = Chart {
            title: "T",
            x_label: "x",
            y_label: "y",
            log_x: true,
            log_y: true,
            series: &series,
            reference: None,
            guide_then_points: false,
        };
        let layout = Layout::new(&chart);
        assert!(!layout.x.log);
        assert!(layout.y.log);
        assert_eq!(layout.title, "T [x axis linear: data has values <= 0]");

        let series = [new_series(
            "s",
            vec![(1.0, f64::NAN), (1.0, 1.0), (-1e200, 2.0)],
        )];
        let chart = Chart {
            log_x: false,
            log_y: false,
            series: &series,
            ..chart
        };
        let layout = Layout::new(&chart);
        assert_eq!(
            layout.title,
            "T [2 points omitted: not finite or out of plottable range]"
        );
    }

    /// Checks the axis invariants and that every plottable input value is inside the range.
    fn check_axis(values: &[f64], log: bool) {
        let range = AxisRange::new(values.iter().copied(), log);
        assert_eq!(range.log, log, "{values:?}");
        assert!(range.lo_value.is_finite(), "{values:?} -> {range:?}");
        assert!(range.hi_value.is_finite(), "{values:?} -> {range:?}");
        assert!(range.lo_value < range.hi_value, "{values:?} -> {range:?}");
        if range.log {
            assert!(range.lo_value > 0.0, "{values:?} -> {range:?}");
            assert!((range.hi_value / range.lo_value).is_finite(), "{range:?}");
        } else {
            assert!((range.hi_value - range.lo_value).is_finite(), "{range:?}");
        }
        for v in values.iter().filter(|v| is_plottable(**v, log)) {
            assert!(
                range.lo_value <= *v && *v <= range.hi_value,
                "{v} outside {range:?}"
            );
        }
    }

    #[test]
    fn axis_ranges() {
        check_axis(&[], false);
        check_axis(&[], true);
        check_axis(&[0.0], false);
        check_axis(&[0.0], true);
        check_axis(&[7.0], true);
        check_axis(&[-7.0, -7.0], false);
        check_axis(&[1.0, 1e9], true);
        check_axis(&[-1.0, 1e9], false);
        check_axis(&[f64::NAN, 2.0, f64::NEG_INFINITY], true);
        check_axis(&[f64::MAX], false);
        check_axis(&[-f64::MAX, f64::MAX, 3.0], false);
        check_axis(&[-VALUE_ABS_MAX, VALUE_ABS_MAX], false);
        check_axis(&[VALUE_LOG_MIN, VALUE_ABS_MAX], true);
        check_axis(&[f64::MIN_POSITIVE, 1e300], true);
        check_axis(&[5e-324, 1e-323], false);
        check_axis(&[1e10, 1e10 + 1.0], false);
        check_axis(&[1.0, 1.0 + f64::EPSILON], true);
    }

    #[test]
    fn tick_labels() {
        let check = |value: f64, use_exponent: bool, expected: &str| {
            assert_eq!(format_tick(value, use_exponent), expected);
        };
        check(0.0, false, "0");
        check(0.0, true, "0");
        check(0.1 + 0.2, false, "0.3");
        check(250.0, false, "250");
        check(100_000.0, false, "100000");
        check(1e6, true, "1e6");
        check(2.5e-6, true, "2.5e-6");
        check(-40_000.0, false, "-40000");
    }

    #[test]
    fn tick_notation_per_axis() {
        let check = |lo_value: f64, hi_value: f64, log: bool, expected: bool| {
            let range = AxisRange {
                lo_value,
                hi_value,
                log,
            };
            assert_eq!(range.wants_exponent(), expected, "{range:?}");
        };
        check(0.0, 100_000.0, false, false);
        check(0.0, 3e6, false, true);
        check(-1e-4, 1e-4, false, true);
        check(50.0, 1e5, true, false);
        check(1e-6, 1.0, true, true);
    }

    #[test]
    fn log_range_shows_two_decades_at_least() {
        let range = AxisRange::new([5.0].into_iter(), true);
        assert_eq!((range.lo_value, range.hi_value), (1.0, 10.0));
        let range = AxisRange::new([2.0, 30.0].into_iter(), true);
        assert_eq!((range.lo_value, range.hi_value), (1.0, 100.0));
        let range = AxisRange::new([10.0, 1e6].into_iter(), true);
        assert!(range.lo_value < 10.0 && range.lo_value > 1.0, "{range:?}");
    }

    #[test]
    fn series_colors_are_distinct() {
        let colors: Vec<_> = (0..50).map(|i| series_color(i).rgb()).collect();
        for (i, a) in colors.iter().enumerate() {
            assert_ne!(*a, REFERENCE_COLOR.rgb(), "series {i} is black");
            for (j, b) in colors.iter().enumerate().skip(i + 1) {
                assert_ne!(a, b, "series {i} and {j} share a colour");
            }
        }
    }
}
