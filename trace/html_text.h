// Text placed in the self-contained HTML pages (the scope-tree viewer, the job report): escaped so
// that names from a program (scopes, communicators) always stay text.
#pragma once

#include <string>
#include <string_view>

namespace meshrt::trace {

// `text` for an HTML text node or a quoted attribute value: & < > " ' escaped.
std::string html_escape(std::string_view text);

// `json` for a <script type="application/json"> block: every '<' (which JSON has only inside
// strings) written as \u003c, which means the same, so no "</script>" in a name ends the block.
std::string json_for_script(std::string_view json);

}  // namespace meshrt::trace
