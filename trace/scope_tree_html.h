// The scope-tree viewer (trace/viewer/scope_tree.html, installed to share/meshrt/) as one
// self-contained file with a scope tree embedded: open it in any browser, no server or network.
#pragma once

#include <string>
#include <string_view>

namespace meshrt::trace {

// The viewer page with `scope_tree_json` (ScopeTree::json's output) embedded in its
// <script type="application/json" id="scope-tree-data"> block.
std::string scope_tree_html(std::string_view scope_tree_json);

// Writes the page for ScopeTree::instance().json(global_rank, noise_level) to `path` atomically;
// false on failure.
bool write_scope_tree_html(const std::string& path, int global_rank, int noise_level);

}  // namespace meshrt::trace
