// A minimal HTTP client for `meshtrace live`: one GET with a deadline, over Boost.Beast.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace meshrt::trace {

// Where a status server is: from "HOST:PORT", "http://HOST:PORT/" or meshrun's printed URL
// "http://HOST:PORT/?token=...". Throws InputError for anything else.
struct HttpEndpoint {
  std::string host;
  uint16_t port = 0;
  std::string query;   // "token=..." or empty; passed on with every request.
  std::string bearer;  // When not empty, sent as "Authorization: Bearer <it>".
};
HttpEndpoint parse_http_endpoint(const std::string& text);

// The status server `text` names for `meshtrace live`: HOST:PORT, a URL, or a file holding the
// URL (meshrun's <log dir>/status_url). Without a ?token= in it, MESHRT_STATUS_TOKEN's value is
// sent as a bearer token (the status server wants the job's token on every request).
HttpEndpoint status_endpoint(const std::string& text);

// The answer to one GET.
struct HttpResponse {
  int status = 0;
  std::string body;
};

// GETs `path` (with the endpoint's query) within `timeout`; throws InputError naming the URL and
// the cause when no answer comes (refused, timed out, not HTTP).
HttpResponse http_get(const HttpEndpoint& at, const std::string& path,
                      std::chrono::milliseconds timeout);

}  // namespace meshrt::trace
