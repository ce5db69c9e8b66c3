// The job report's page: trace/viewer/job_report.html with the sections written in, from the data
// document that trace/analyze/job_report.h describes.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace meshrt::trace {

// The page for `data`: every number it shows comes from `data`, which it embeds as #report-data.
std::string job_report_html(const nlohmann::ordered_json& data);

}  // namespace meshrt::trace
