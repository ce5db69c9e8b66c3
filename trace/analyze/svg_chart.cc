#include "trace/analyze/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "trace/html_text.h"

namespace meshrt::trace {
namespace {

// Tick positions of an axis, in the axis's own units (log units for log axes).
struct Ticks {
  double lo = 0;
  double hi = 1;
  std::vector<double> at;
};

Ticks log_ticks(double min_value, double max_value, int base) {
  const double lb = std::log(static_cast<double>(base));
  Ticks t;
  // The epsilon keeps an exact power of the base on its own tick instead of a step beyond.
  t.lo = std::floor(std::log(min_value) / lb + 1e-9);
  t.hi = std::ceil(std::log(max_value) / lb - 1e-9);
  if (t.hi <= t.lo) {
    t.lo -= 1;
    t.hi += 1;
  }
  if (base == 10) {
    const bool fine = t.hi - t.lo < 3;  // Few decades: 1-2-5 ticks keep the axis readable.
    for (double k = t.lo; k <= t.hi; k += 1) {
      t.at.push_back(k);
      if (fine && k < t.hi) {
        t.at.push_back(k + std::log10(2.0));
        t.at.push_back(k + std::log10(5.0));
      }
    }
  } else {
    const double step = std::max(1.0, std::ceil((t.hi - t.lo) / 8));
    for (double k = t.lo; k <= t.hi; k += step) t.at.push_back(k);
  }
  return t;
}

// 1, 2 or 5 times a power of ten, at least `value`.
double nice_step(double value) {
  const double p = std::pow(10.0, std::floor(std::log10(value)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= value * (1 - 1e-9)) return m * p;
  }
  return 10 * p;
}

std::string num(double v) { return fmt::format("{:.1f}", v); }

// A marker centred at (x, y), with its tooltip.
std::string marker_svg(Marker marker, double x, double y, double r, const std::string& color,
                       const std::string& tooltip) {
  const std::string title = tooltip.empty() ? "" : "<title>" + html_escape(tooltip) + "</title>";
  const std::string fill = fmt::format(R"( fill="{}" stroke="#fff" stroke-width="1")", color);
  switch (marker) {
    case Marker::kSquare:
      return fmt::format(R"(<rect class="point" x="{}" y="{}" width="{}" height="{}"{}>{}</rect>)",
                         num(x - r), num(y - r), num(2 * r), num(2 * r), fill, title);
    case Marker::kTriangle:
      return fmt::format(R"(<path class="point" d="M{} {}L{} {}L{} {}Z"{}>{}</path>)", num(x),
                         num(y - 1.2 * r), num(x + 1.1 * r), num(y + 0.8 * r), num(x - 1.1 * r),
                         num(y + 0.8 * r), fill, title);
    case Marker::kDiamond:
      return fmt::format(R"(<path class="point" d="M{} {}L{} {}L{} {}L{} {}Z"{}>{}</path>)", num(x),
                         num(y - 1.3 * r), num(x + 1.3 * r), num(y), num(x), num(y + 1.3 * r),
                         num(x - 1.3 * r), num(y), fill, title);
    case Marker::kCircle:
      break;
  }
  return fmt::format(R"(<circle class="point" cx="{}" cy="{}" r="{}"{}>{}</circle>)", num(x),
                     num(y), num(r), fill, title);
}

}  // namespace

std::string svg_line_chart(const std::vector<LineSeries>& series, const LogAxis& x_axis,
                           const LogAxis& y_axis, int width, int height) {
  double x_min = std::numeric_limits<double>::infinity(), x_max = 0;
  double y_min = x_min, y_max = 0;
  for (const LineSeries& s : series) {
    for (const auto* list : {&s.points, &s.samples}) {
      for (const ChartPoint& p : *list) {
        if (p.x <= 0 || p.y <= 0) continue;
        x_min = std::min(x_min, p.x);
        x_max = std::max(x_max, p.x);
        y_min = std::min(y_min, p.y);
        y_max = std::max(y_max, p.y);
      }
    }
  }
  if (x_max <= 0) {  // Nothing to draw: an empty frame keeps the page's layout.
    x_min = x_max = 1;
    y_min = y_max = 1;
  }
  const Ticks xt = log_ticks(x_min, x_max, x_axis.base);
  const Ticks yt = log_ticks(y_min, y_max, y_axis.base);
  const double left = 72, right = 16, top = 26, bottom = 44;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  const double x_log = std::log(static_cast<double>(x_axis.base));
  const double y_log = std::log(static_cast<double>(y_axis.base));
  auto px = [&](double v) {
    return left + (std::log(v) / x_log - xt.lo) / (xt.hi - xt.lo) * plot_w;
  };
  auto py = [&](double v) {
    return top + plot_h - (std::log(v) / y_log - yt.lo) / (yt.hi - yt.lo) * plot_h;
  };

  std::string out = fmt::format(
      R"(<svg class="chart line-chart" viewBox="0 0 {0} {1}" width="{0}" height="{1}" role="img" aria-label="{2} against {3}">)",
      width, height, html_escape(y_axis.label), html_escape(x_axis.label));
  out += R"(<g class="grid">)";
  for (double t : xt.at) {
    const double x = left + (t - xt.lo) / (xt.hi - xt.lo) * plot_w;
    out += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{0}" y2="{2}"/>)", num(x), num(top),
                       num(top + plot_h));
  }
  for (double t : yt.at) {
    const double y = top + plot_h - (t - yt.lo) / (yt.hi - yt.lo) * plot_h;
    out += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{2}" y2="{1}"/>)", num(left), num(y),
                       num(left + plot_w));
  }
  out += "</g>";
  out += fmt::format(R"(<rect class="frame" x="{}" y="{}" width="{}" height="{}"/>)", num(left),
                     num(top), num(plot_w), num(plot_h));
  out += R"(<g class="axis x-axis">)";
  for (double t : xt.at) {
    const double x = left + (t - xt.lo) / (xt.hi - xt.lo) * plot_w;
    out += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">{}</text>)", num(x),
                       num(top + plot_h + 16),
                       html_escape(x_axis.tick_label(std::pow(x_axis.base, t))));
  }
  out += fmt::format(R"(<text class="axis-label" x="{}" y="{}" text-anchor="middle">{}</text>)",
                     num(left + plot_w / 2), num(height - 6), html_escape(x_axis.label));
  out += R"(</g><g class="axis y-axis">)";
  for (double t : yt.at) {
    const double y = top + plot_h - (t - yt.lo) / (yt.hi - yt.lo) * plot_h;
    out += fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text>)", num(left - 6),
                       num(y + 4), html_escape(y_axis.tick_label(std::pow(y_axis.base, t))));
  }
  out += fmt::format(R"(<text class="axis-label" x="{}" y="{}" text-anchor="start">{}</text>)",
                     num(4), num(14), html_escape(y_axis.label));
  out += "</g>";

  for (const LineSeries& s : series) {
    out +=
        fmt::format(R"(<g class="series"{}><title>{}</title>)", s.attributes, html_escape(s.label));
    out += R"(<g class="samples">)";
    for (const ChartPoint& p : s.samples) {
      if (p.x <= 0 || p.y <= 0) continue;
      out += fmt::format(R"(<circle cx="{}" cy="{}" r="2.5" fill="{}"><title>{}</title></circle>)",
                         num(px(p.x)), num(py(p.y)), s.color, html_escape(p.tooltip));
    }
    out += "</g>";
    std::vector<ChartPoint> line;
    for (const ChartPoint& p : s.points) {
      if (p.x > 0 && p.y > 0) line.push_back(p);
    }
    std::sort(line.begin(), line.end(),
              [](const ChartPoint& a, const ChartPoint& b) { return a.x < b.x; });
    if (line.size() > 1) {
      std::string points;
      for (const ChartPoint& p : line) points += num(px(p.x)) + "," + num(py(p.y)) + " ";
      points.pop_back();
      out += fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>)",
                         s.color, points);
    }
    for (const ChartPoint& p : line) {
      out += marker_svg(s.marker, px(p.x), py(p.y), 4.5, s.color, p.tooltip);
    }
    out += "</g>";
  }
  return out + "</svg>";
}

std::string svg_stacked_bars(const std::vector<Bar>& bars, const std::string& axis_label,
                             const std::function<std::string(double)>& tick_label, int width) {
  double max_total = 0;
  for (const Bar& b : bars) {
    double total = 0;
    for (const BarSegment& s : b.segments) total += std::max(0.0, s.value);
    max_total = std::max(max_total, total);
  }
  const double step = max_total > 0 ? nice_step(max_total / 5) : 1;
  const double axis_max = max_total > 0 ? std::ceil(max_total / step - 1e-9) * step : 5;
  // Thinner bars for big jobs, so that the chart stays on a screen or two.
  const double bar_h = bars.size() > 32 ? 10 : 22, gap = bars.size() > 32 ? 3 : 10;
  const double left = 64, right = 84, top = 8, bottom = 40;
  const double plot_w = width - left - right;
  const double plot_h = static_cast<double>(bars.size()) * (bar_h + gap);
  const double height = top + plot_h + bottom;
  auto px = [&](double v) { return left + v / axis_max * plot_w; };

  std::string out = fmt::format(
      R"(<svg class="chart bar-chart" viewBox="0 0 {0} {1}" width="{0}" height="{1}" role="img" aria-label="{2}">)",
      width, num(height), html_escape(axis_label));
  out += R"(<g class="grid">)";
  for (double v = 0; v <= axis_max * (1 + 1e-9); v += step) {
    out += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{0}" y2="{2}"/>)", num(px(v)), num(top),
                       num(top + plot_h));
  }
  out += R"(</g><g class="axis x-axis">)";
  for (double v = 0; v <= axis_max * (1 + 1e-9); v += step) {
    out += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">{}</text>)", num(px(v)),
                       num(top + plot_h + 16), html_escape(tick_label(v)));
  }
  out += fmt::format(R"(<text class="axis-label" x="{}" y="{}" text-anchor="middle">{}</text>)",
                     num(left + plot_w / 2), num(height - 4), html_escape(axis_label));
  out += "</g>";
  double y = top + gap / 2;
  for (const Bar& b : bars) {
    out += fmt::format(R"(<g class="bar"{}>)", b.attributes);
    out += fmt::format(R"(<text class="bar-label" x="{}" y="{}" text-anchor="end">{}</text>)",
                       num(left - 8), num(y + bar_h / 2 + 4), html_escape(b.label));
    double x = 0;
    for (const BarSegment& s : b.segments) {
      if (s.value <= 0) continue;
      out += fmt::format(
          R"(<rect class="segment" x="{}" y="{}" width="{}" height="{}" fill="{}"{}><title>{}</title></rect>)",
          num(px(x)), num(y), num(px(x + s.value) - px(x)), num(bar_h), s.color, s.attributes,
          html_escape(s.tooltip));
      x += s.value;
    }
    out += fmt::format(R"(<text class="bar-total" x="{}" y="{}">{}</text>)", num(px(x) + 6),
                       num(y + bar_h / 2 + 4), html_escape(b.total));
    out += "</g>";
    y += bar_h + gap;
  }
  return out + "</svg>";
}

std::string svg_legend_marker(Marker marker, const std::string& color, bool line) {
  std::string out = R"(<svg class="legend-marker" viewBox="0 0 28 14" width="28" height="14">)";
  if (line) {
    out +=
        fmt::format(R"(<line x1="1" y1="7" x2="27" y2="7" stroke="{}" stroke-width="2"/>)", color);
  }
  return out + marker_svg(marker, 14, 7, 4.5, color, "") + "</svg>";
}

}  // namespace meshrt::trace
