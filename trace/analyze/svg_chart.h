// Inline SVG charts for the job report: a line chart on log-log axes and horizontal stacked bars.
// Plain SVG (no script), so the page renders in any browser and in viewers that block scripts;
// every mark carries a <title> (the browser's tooltip) with its exact value.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace meshrt::trace {

// Point shapes, so that series of one colour stay apart (ops of one mesh dim share its colour).
enum class Marker { kCircle, kSquare, kTriangle, kDiamond };

// One point of a chart, in data units, with its tooltip (plain text, escaped when written).
struct ChartPoint {
  double x = 0;
  double y = 0;
  std::string tooltip;
};

// One line of a line chart: `points` joined in x order, with markers; `samples` drawn as faint
// dots under it (the per-rank values the line summarises).
struct LineSeries {
  std::string label;
  std::string color;  // A CSS colour.
  Marker marker = Marker::kCircle;
  std::string attributes;  // Extra attributes of the series' <g>, escaped: ` data-dim="tp"`.
  std::vector<ChartPoint> points;
  std::vector<ChartPoint> samples;
};

// A logarithmic axis: `base` 2 puts a tick at every power of two (thinned to about 8 labels),
// base 10 at every decade (and at 2 and 5 times it when the data spans fewer than 3 decades).
struct LogAxis {
  std::string label;
  int base = 10;
  std::function<std::string(double)> tick_label;  // From a data value.
};

// A line chart `width` x `height` pixels on log-log axes; points with x or y <= 0 are left out.
std::string svg_line_chart(const std::vector<LineSeries>& series, const LogAxis& x,
                           const LogAxis& y, int width, int height);

// One coloured part of a bar.
struct BarSegment {
  double value = 0;
  std::string color;
  std::string tooltip;
  std::string attributes;  // Extra attributes of its <rect>, escaped.
};

// One horizontal bar: segments stacked left to right, `label` on its left, `total` on its right.
struct Bar {
  std::string label;
  std::string total;
  std::string attributes;  // Extra attributes of the bar's <g>, escaped.
  std::vector<BarSegment> segments;
};

// Horizontal stacked bars on a linear axis from 0, `width` pixels wide and as tall as the bars
// need; `tick_label` writes the axis values.
std::string svg_stacked_bars(const std::vector<Bar>& bars, const std::string& axis_label,
                             const std::function<std::string(double)>& tick_label, int width);

// A marker alone in a small inline <svg>, for legends.
std::string svg_legend_marker(Marker marker, const std::string& color, bool line);

}  // namespace meshrt::trace
