#include "trace/scope_tree_html.h"

#include "trace/atomic_file.h"
#include "trace/html_text.h"
#include "trace/scope_tree.h"
#include "trace/scope_tree_html_template.h"

namespace meshrt::trace {

std::string scope_tree_html(std::string_view scope_tree_json) {
  const std::string_view page = kScopeTreeHtmlTemplate;
  constexpr std::string_view kOpen = R"(<script type="application/json" id="scope-tree-data">)";
  const size_t at = page.find(kOpen) + kOpen.size();
  std::string out(page.substr(0, at));
  out += json_for_script(scope_tree_json);
  out += page.substr(at);
  return out;
}

bool write_scope_tree_html(const std::string& path, int global_rank, int noise_level) {
  return write_file_atomically(
      path, scope_tree_html(ScopeTree::instance().json(global_rank, noise_level)));
}

}  // namespace meshrt::trace
