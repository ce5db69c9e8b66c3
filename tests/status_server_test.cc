// meshrun's live view (docs/diagnosis.md, "A live view"), below the end-to-end test in
// live_diagnosis_test: the live board's JSON, the status server's routes over real HTTP on
// 127.0.0.1 (with meshtrace's own client), its token, its limits, and `meshtrace live`'s text.
#include "launcher/status_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>
#include <thread>

#include "launcher/live_board.h"
#include "launcher/live_stragglers.h"
#include "runtime/store/live_keys.h"
#include "runtime/store/tcp_store.h"
#include "runtime/store/tcp_store_server.h"
#include "trace/analyze/dump_reader.h"
#include "trace/analyze/http_get.h"
#include "trace/analyze/live_status_text.h"
#include "trace/live_metrics.h"
#include "trace/op_kind.h"

namespace meshrt::launcher {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using trace::http_get;
using trace::HttpEndpoint;

// A progress record as runtime/progress_publisher.h writes it, published `age_ms` ago.
std::string record(int rank, const std::string& state, int64_t state_ms, bool in_op,
                   int64_t age_ms) {
  json in_flight = nullptr;
  if (in_op) {
    in_flight = {{"op", "all_reduce"}, {"seq", 37},        {"p2p", false},
                 {"peer", -1},         {"channel_seq", 0}, {"running_ms", 4000}};
  }
  return json{{"rank", rank},
              {"wall_ns", wall_now_ns() - age_ms * 1'000'000},
              {"state", state},
              {"state_ms", state_ms},
              {"comms", json::array({{{"name", "mesh0/tp"},
                                      {"mesh_dim", "tp"},
                                      {"ranks", {0, 1}},
                                      {"enqueued", in_op ? 37 : 36},
                                      {"started", in_op ? 37 : 36},
                                      {"completed", 36},
                                      {"in_flight", in_flight}}})}}
      .dump();
}

// A board for a 2-rank job whose rank 0 has waited in tp all_reduce #37 for 4 s (as of a
// record 1 s old) and whose rank 1 computes; stall threshold 10 s.
std::unique_ptr<LiveBoard> stalled_board() {
  auto board = std::make_unique<LiveBoard>("job42", 10);
  board->begin_attempt(0, 2, nullptr);
  board->set_progress(
      {record(0, "in_op", 4000, true, 1000), record(1, "user_code", 4000, false, 0)});
  return board;
}

TEST(LiveBoard, StatusJsonAdvancesTimesByTheRecordsAge) {
  auto board = stalled_board();
  const json j = json::parse(board->status_json(wall_now_ns()));
  EXPECT_EQ(j["run_id"], "job42");
  EXPECT_EQ(j["attempt"], 0);
  EXPECT_TRUE(j["running"].get<bool>());
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_EQ(j["stall_threshold_s"], 10);
  ASSERT_EQ(j["ranks"].size(), 2u);
  const json& f = j["ranks"][0]["comms"][0]["in_flight"];
  EXPECT_EQ(f["op"], "all_reduce");
  EXPECT_EQ(f["seq"], 37);
  // 4000 ms running when published, published about 1000 ms ago.
  EXPECT_GE(f["running_ms"].get<int64_t>(), 4990);
  EXPECT_LT(f["running_ms"].get<int64_t>(), 6000);
  EXPECT_EQ(j["ranks"][1]["state"], "user_code");
  EXPECT_TRUE(j["ranks"][1]["comms"][0]["in_flight"].is_null());
  EXPECT_TRUE(j["verdict"].is_null());
}

TEST(LiveBoard, VerdictShowsUntilItClears) {
  auto board = stalled_board();
  board->add_event("stall 10 s: mesh0/tp all_reduce #37 (dim tp) — rank 1 has not entered it",
                   true);
  json j = json::parse(board->status_json(wall_now_ns()));
  EXPECT_EQ(j["verdict"]["line"],
            "stall 10 s: mesh0/tp all_reduce #37 (dim tp) — rank 1 has not entered it");
  board->add_event("stall cleared: mesh0/tp all_reduce #37 on rank 0 is no longer stuck", false);
  j = json::parse(board->status_json(wall_now_ns()));
  EXPECT_TRUE(j["verdict"].is_null());
  ASSERT_EQ(j["events"].size(), 2u);
  EXPECT_FALSE(j["events"][1]["active"].get<bool>());
}

// A rank whose process ended shows how, not "no record yet" or its last state; a record far
// older than the 1 s period is marked silent.
TEST(LiveBoard, EndedRanksAndStaleRecordsSayWhatTheyAre) {
  LiveBoard board("job", 10);
  board.begin_attempt(0, 2, nullptr);
  board.set_progress({record(0, "in_op", 4000, true, 7000), ""});
  board.rank_ended(1, "killed by SIGKILL");
  const std::string status = board.status_json(wall_now_ns());
  const json j = json::parse(status);
  EXPECT_EQ(j["ranks"][1]["state"], "ended");
  EXPECT_EQ(j["ranks"][1]["ended"], "killed by SIGKILL");
  const std::string text = trace::format_live_status(status);
  EXPECT_NE(text.find("process killed by SIGKILL"), std::string::npos) << text;
  EXPECT_EQ(text.find("no record yet"), std::string::npos) << text;
  EXPECT_NE(text.find("(record 7.0 s old: silent)"), std::string::npos) << text;
}

TEST(LiveBoard, RecordsThatAreNotRecordsShowAsUnknown) {
  LiveBoard board("job", 10);
  board.begin_attempt(0, 3, nullptr);
  board.set_progress({"", "not json", R"({"rank": 2, "comms": 5})"});
  const json j = json::parse(board.status_json(wall_now_ns()));
  for (int r = 0; r < 3; ++r) EXPECT_EQ(j["ranks"][r]["state"], "unknown") << r;
}

TEST(StatusServer, RoutesAnswerAsDocumented) {
  auto board = stalled_board();
  StatusServerOptions o;
  o.token = "t";
  EXPECT_EQ(answer_status_request(*board, o, "GET", "/?token=t").status, 200);
  EXPECT_NE(
      answer_status_request(*board, o, "GET", "/?token=t").body.find("<title>meshrun: live status"),
      std::string::npos);
  const HttpReply s = answer_status_request(*board, o, "GET", "/status.json?x=1&token=t");
  EXPECT_EQ(s.status, 200);
  EXPECT_EQ(s.content_type, "application/json");
  EXPECT_EQ(json::parse(s.body)["run_id"], "job42");
  EXPECT_EQ(answer_status_request(*board, o, "POST", "/status.json?token=t").status, 405);
  EXPECT_EQ(answer_status_request(*board, o, "GET", "/etc/passwd?token=t").status, 404);
  EXPECT_EQ(answer_status_request(*board, o, "GET", "/ranks/x/stacks?token=t").status, 404);
  EXPECT_EQ(answer_status_request(*board, o, "GET", "/ranks/-1/stacks?token=t").status, 404);
  EXPECT_EQ(answer_status_request(*board, o, "GET", "/ranks/0/other?token=t").status, 404);
  const HttpReply m = answer_status_request(*board, o, "GET", "/metrics?token=t");
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(m.content_type, "text/plain; version=0.0.4; charset=utf-8");
  // No store behind the attempt's board here: no snapshot can be asked for.
  board->end_attempt();
  const HttpReply none = answer_status_request(*board, o, "GET", "/ranks/0/stacks?token=t");
  EXPECT_EQ(none.status, 503);
  EXPECT_EQ(none.body, "no attempt of the job is running\n");
}

// Issue #29: every request on every address carries the job's token, in the query or as a
// bearer token (how Prometheus's `authorization` setting sends it).
TEST(StatusServer, EveryRequestWantsTheTokenInItsQueryOrAsABearer) {
  auto board = stalled_board();
  StatusServerOptions o;
  o.token = "s3cret";
  for (const char* path :
       {"/", "/status.json", "/metrics", "/ranks/0/snapshot", "/ranks/0/stacks", "/nothing"}) {
    const std::string p = path;
    EXPECT_EQ(answer_status_request(*board, o, "GET", p).status, 403) << p;
    EXPECT_EQ(answer_status_request(*board, o, "GET", p + "?token=s3cre").status, 403) << p;
    EXPECT_EQ(answer_status_request(*board, o, "GET", p + "?token=s3cret0").status, 403) << p;
    EXPECT_EQ(answer_status_request(*board, o, "GET", p + "?token=").status, 403) << p;
    EXPECT_EQ(answer_status_request(*board, o, "GET", p, "Bearer s3cre").status, 403) << p;
    EXPECT_EQ(answer_status_request(*board, o, "GET", p, "Basic s3cret").status, 403) << p;
    EXPECT_EQ(answer_status_request(*board, o, "GET", p, "Bearer").status, 403) << p;
    EXPECT_EQ(answer_status_request(*board, o, "GET", p, "s3cret").status, 403) << p;
  }
  EXPECT_EQ(answer_status_request(*board, o, "GET", "/status.json?token=s3cret").status, 200);
  EXPECT_EQ(answer_status_request(*board, o, "GET", "/?a=b&token=s3cret").status, 200);
  EXPECT_EQ(answer_status_request(*board, o, "GET", "/metrics", "Bearer s3cret").status, 200);
  EXPECT_EQ(answer_status_request(*board, o, "GET", "/status.json", "bearer  s3cret ").status, 200);
  // The query's token is enough, whatever else the header says.
  EXPECT_EQ(answer_status_request(*board, o, "GET", "/?token=s3cret", "Bearer x").status, 200);
  // A server without a token (only a caller of answer_status_request can have one) serves
  // nobody.
  EXPECT_EQ(answer_status_request(*board, {}, "GET", "/status.json").status, 403);
  EXPECT_EQ(answer_status_request(*board, {}, "GET", "/status.json?token=").status, 403);
}

// A completed op of `bytes` that ran `run_us` on `comm` (0: its start was not measured).
trace::OpRecord op_record(std::shared_ptr<const trace::CommInfo> comm, OpKind kind, uint64_t bytes,
                          int64_t run_us) {
  trace::OpRecord r;
  r.comm = std::move(comm);
  r.kind = kind;
  r.op = trace::op_kind_name(kind);
  r.is_p2p = trace::is_p2p(kind);
  r.bytes = bytes;
  r.enqueue_ns = 1'000'000;
  r.start_ns = run_us > 0 ? 2'000'000 : 0;
  r.end_ns = 2'000'000 + run_us * 1000 + 1;
  r.state = trace::OpState::kCompleted;
  return r;
}

std::shared_ptr<trace::CommInfo> comm_info(int global_rank, std::string name, std::string dim) {
  auto c = std::make_shared<trace::CommInfo>();
  c->uid = static_cast<uint64_t>(global_rank) * 100 + name.size();
  c->name = std::move(name);
  c->mesh_dim = std::move(dim);
  c->backend = "gloo";
  c->global_ranks = {0, 1};
  c->rank = global_rank;
  c->global_rank = global_rank;
  return c;
}

// The record of `rank` with `metrics` as its totals, published now.
std::string record_with(int rank, const json& metrics) {
  json j = json::parse(record(rank, rank == 0 ? "in_op" : "user_code", 4000, rank == 0, 0));
  j["metrics"] = metrics;
  return j.dump();
}

// Lines of `text` that begin with `prefix`.
int count_lines(const std::string& text, const std::string& prefix) {
  int n = 0;
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\n', at);
    if (text.compare(at, prefix.size(), prefix) == 0) ++n;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return n;
}

TEST(LiveMetrics, TotalsPerCommOpAndSizeMergedByName) {
  trace::LiveMetrics m;
  auto tp = comm_info(0, "mesh0/tp", "tp");
  // The same name again (a communicator destroyed and made anew): one series, summed.
  auto tp_again = comm_info(0, "mesh0/tp", "tp");
  tp_again->uid = 999;
  auto world = comm_info(0, "world", "");
  m.on_end(op_record(tp, OpKind::kAllReduce, 4096, 100));
  m.on_end(op_record(tp_again, OpKind::kAllReduce, 5000, 300));
  m.on_end(op_record(tp, OpKind::kAllReduce, 3000, 0));  // Untimed, the 2-4KiB bucket.
  m.on_end(op_record(world, OpKind::kBarrier, 0, 50));
  trace::OpRecord failed = op_record(tp, OpKind::kAllReduce, 4096, 100);
  failed.state = trace::OpState::kFailed;
  m.on_end(failed);
  m.on_end(op_record(comm_info(1, "mesh0/tp", "tp"), OpKind::kAllReduce, 4096, 100));
  const json j = m.rank_json(0);
  ASSERT_EQ(j.size(), 3u) << j.dump();
  // Sorted by name, op, size.
  EXPECT_EQ(j[0]["comm"], "mesh0/tp");
  EXPECT_EQ(j[0]["size_bytes"], 2048);
  EXPECT_EQ(j[0]["ops"], 1);
  EXPECT_EQ(j[0]["timed_ops"], 0);
  EXPECT_EQ(j[1]["size_bytes"], 4096);
  EXPECT_EQ(j[1]["mesh_dim"], "tp");
  EXPECT_EQ(j[1]["ops"], 2);
  EXPECT_EQ(j[1]["bytes"], 9096);
  EXPECT_EQ(j[1]["timed_ops"], 2);
  // all_reduce on 2 ranks: busbw = algbw (nccl-tests' factor 2(n-1)/n = 1), bytes over time.
  EXPECT_NEAR(j[1]["busbw_bytes_per_second"].get<double>(), 9096 / 400.002e-6, 1.0);
  EXPECT_NEAR(j[1]["exec_seconds"].get<double>(), 400e-6, 1e-8);
  EXPECT_EQ(j[2]["comm"], "world");
  EXPECT_EQ(j[2]["mesh_dim"], "world");            // The default group's label, never "unknown".
  EXPECT_EQ(j[2]["busbw_bytes_per_second"], 0.0);  // A barrier moves no bus bytes.
  EXPECT_EQ(m.rank_json(1).size(), 1u);
  EXPECT_EQ(m.rank_json(2).size(), 0u);
}

// The merge: every rank's totals and the board's gauges in one exposition, each family's HELP and
// TYPE once, labels escaped, accepted by promtool.
TEST(LiveMetrics, JobExpositionHasEachFamilyOnceAndEscapedLabels) {
  trace::LiveMetrics m;
  const std::string odd = "mesh0/\"t\\p\"\nx";  // A quote, a backslash, a newline.
  for (int r = 0; r < 2; ++r) {
    m.on_end(op_record(comm_info(r, odd, "tp"), OpKind::kAllReduce, 4096, 100));
    m.on_end(op_record(comm_info(r, "world", ""), OpKind::kBarrier, 0, 50));
  }
  auto board = std::make_unique<LiveBoard>("job42", 10);
  board->begin_attempt(0, 2, nullptr);
  board->set_progress({record_with(0, m.rank_json(0)), record_with(1, m.rank_json(1))});
  board->set_stall(0, "mesh0/tp", "all_reduce", 37);
  const std::string text = board->metrics_text(wall_now_ns());
  for (const char* family :
       {"meshrt_ops_total", "meshrt_bytes_total", "meshrt_op_exec_time_seconds",
        "meshrt_bus_bandwidth_bytes_per_second", "meshrt_rank_state", "meshrt_stalled",
        "meshrt_in_flight_op_age_seconds"}) {
    EXPECT_EQ(count_lines(text, fmt::format("# TYPE {} ", family)), 1) << family << "\n" << text;
    EXPECT_EQ(count_lines(text, fmt::format("# HELP {} ", family)), 1) << family;
  }
  EXPECT_NE(text.find(R"(meshrt_ops_total{rank="1",comm="mesh0/\"t\\p\"\nx",mesh_dim="tp",)"
                      R"(op="all_reduce",message_size="4-8KiB"} 1)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(meshrt_ops_total{rank="0",comm="world",mesh_dim="world",op="barrier",)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(meshrt_bytes_total{rank="0",comm="mesh0/\"t\\p\"\nx")"),
            std::string::npos);
  EXPECT_NE(text.find(R"(le="+Inf"} 1)"), std::string::npos);
  EXPECT_NE(text.find(R"(meshrt_rank_state{rank="0",state="in_op"} 1)"), std::string::npos);
  EXPECT_NE(text.find(R"(meshrt_rank_state{rank="1",state="user_code"} 1)"), std::string::npos);
  EXPECT_NE(text.find(R"(meshrt_in_flight_op_age_seconds{rank="0",comm="mesh0/tp",)"
                      R"(mesh_dim="tp",op="all_reduce"} 4)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("meshrt_stalled 1\n"), std::string::npos);
  EXPECT_NE(text.find(R"(meshrt_stalled_op{rank="0",comm="mesh0/tp",mesh_dim="tp",)"
                      R"(op="all_reduce",seq="37"} 1)"),
            std::string::npos);
  EXPECT_EQ(text.find("unknown"), std::string::npos) << text;
  // No barrier bandwidth: a barrier moves no bus bytes.
  EXPECT_EQ(text.find(R"(meshrt_bus_bandwidth_bytes_per_second{rank="0",comm="world")"),
            std::string::npos);
  board->clear_stall();
  EXPECT_NE(board->metrics_text(wall_now_ns()).find("meshrt_stalled 0\n"), std::string::npos);

  const std::string file = ::testing::TempDir() + "/metrics_" + std::to_string(::getpid());
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
  // promtool is a declared test dependency (.ci/install-deps.sh: prometheus).
  const int rc = std::system(fmt::format("promtool check metrics < '{}'", file).c_str());
  EXPECT_EQ(rc, 0) << text;
  std::remove(file.c_str());
}

TEST(StatusServer, StacksTextFromASnapshot) {
  const json snap = {{"meshrt_threads",
                      {{{"tid", 7},
                        {"name", "train"},
                        {"main", true},
                        {"answered", true},
                        {"frames",
                         {{{"function", "step()"}, {"file", "train.cc"}, {"line", 88}},
                          {{"function", "main"}, {"file", "train.cc"}, {"line", 120}}}}},
                       {{"tid", 9},
                        {"name", "w"},
                        {"main", false},
                        {"answered", false},
                        {"frames", json::array()}}}}};
  EXPECT_EQ(stacks_text(snap.dump()),
            "thread 7 'train' (main thread)\n"
            "    step() (train.cc:88)\n"
            "    main (train.cc:120)\n"
            "thread 9 'w'\n"
            "    (did not answer in time)");
  EXPECT_EQ(stacks_text("{}"), "(the snapshot carries no thread stacks)");
  EXPECT_EQ(stacks_text("garbage"), "(the snapshot carries no thread stacks)");
}

// Over real HTTP: meshtrace's client against the server, on 127.0.0.1.
TEST(StatusServer, ServesOverHttpAndASilentClientHoldsUpNobody) {
  auto board = stalled_board();
  StatusServerOptions o;
  o.io_timeout = 2000ms;
  StatusServer server(o, *board);
  ASSERT_GT(server.port(), 0);
  // On loopback too the server makes a token (other users of the host reach loopback).
  ASSERT_EQ(server.token().size(), 64u);
  EXPECT_EQ(server.url(),
            "http://127.0.0.1:" + std::to_string(server.port()) + "/?token=" + server.token());
  const HttpEndpoint at = trace::parse_http_endpoint(server.url());

  // A client that connects and never sends a byte.
  const int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(server.port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(silent, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);

  const auto t0 = std::chrono::steady_clock::now();
  const auto page = http_get(at, "/", 5000ms);
  EXPECT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("status.json"), std::string::npos);
  const auto status = http_get(at, "/status.json", 5000ms);
  EXPECT_EQ(status.status, 200);
  EXPECT_EQ(json::parse(status.body)["ranks"][0]["comms"][0]["in_flight"]["seq"], 37);
  EXPECT_EQ(http_get(at, "/nothing", 5000ms).status, 404);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms);
  ::close(silent);
  // The token as a bearer header over the wire, as Prometheus sends it; none, refused.
  HttpEndpoint bearer = at;
  bearer.query.clear();
  EXPECT_EQ(http_get(bearer, "/metrics", 5000ms).status, 403);
  bearer.bearer = server.token();
  const auto metrics = http_get(bearer, "/metrics", 5000ms);
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("# TYPE meshrt_ops_total counter\n"), std::string::npos)
      << metrics.body;
  bearer.bearer = "x" + server.token().substr(1);
  EXPECT_EQ(http_get(bearer, "/metrics", 5000ms).status, 403);
}

// 20 clients that send half a request and wait (slowloris) against 16 connection slots: every
// complete request is still answered, at once, and the dribblers are dropped.
TEST(StatusServer, SlowClientsMakeRoomForCompleteRequests) {
  auto board = stalled_board();
  StatusServer server(StatusServerOptions{}, *board);
  const HttpEndpoint at = trace::parse_http_endpoint(server.url());
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(server.port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<int> slow;
  for (int i = 0; i < 20; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    static constexpr std::string_view kHalf = "GET / HTTP/1.1\r\nHost: x\r\n";
    ASSERT_EQ(::send(fd, kHalf.data(), kHalf.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(kHalf.size()));
    slow.push_back(fd);
  }
  std::this_thread::sleep_for(100ms);  // Let the server take them all in.
  const auto t0 = std::chrono::steady_clock::now();
  int ok = 0;
  for (int i = 0; i < 12; ++i) ok += http_get(at, "/status.json", 5000ms).status == 200 ? 1 : 0;
  EXPECT_EQ(ok, 12);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms);
  for (const int fd : slow) ::close(fd);
}

TEST(StatusServer, AFixedTokenIsTheUsers) {
  ::setenv("MESHRT_STATUS_TOKEN", "mine-42", 1);
  EXPECT_EQ(status_token_from_env_or_new(), "mine-42");
  ::unsetenv("MESHRT_STATUS_TOKEN");
  const std::string a = status_token_from_env_or_new(), b = status_token_from_env_or_new();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
}

TEST(StatusServer, BeyondLoopbackItWantsTheTokenOfItsUrl) {
  auto board = stalled_board();
  StatusServerOptions o;
  o.host = "0.0.0.0";  // Every interface; the test still talks to it over 127.0.0.1.
  StatusServer server(o, *board);
  const std::string url = server.url();
  const size_t at_token = url.find("?token=");
  ASSERT_NE(at_token, std::string::npos) << url;
  EXPECT_EQ(url.size() - at_token - 7, 64u);  // 32 random bytes as hex.
  HttpEndpoint at = trace::parse_http_endpoint(url);
  at.host = "127.0.0.1";
  EXPECT_EQ(http_get(at, "/status.json", 5000ms).status, 200);
  at.query.clear();
  EXPECT_EQ(http_get(at, "/status.json", 5000ms).status, 403);
}

TEST(StatusServer, CannotBindIsAClearError) {
  auto board = stalled_board();
  StatusServer first({}, *board);
  StatusServerOptions o;
  o.port = first.port();
  try {
    StatusServer second(o, *board);
    ADD_FAILURE() << "bound a port in use";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot serve the status page on 127.0.0.1:" +
                                         std::to_string(first.port())),
              std::string::npos)
        << e.what();
  }
}

// The board's snapshots through a real store: rank 0 answers the request, rank 1 does not.
TEST(LiveBoard, SnapshotsWaitBoundedForRanksThatDoNotAnswer) {
  TcpStoreServer store_server;
  TcpStoreOptions co;
  co.port = store_server.port();
  co.token = "";
  auto store = std::make_shared<TcpStore>(co);
  LiveBoard board("job", 10);
  board.begin_attempt(0, 2, store);
  std::atomic<bool> stop{false};
  std::thread rank0([&] {
    TcpStore mine(co);
    int64_t seen = 0;
    while (!stop) {
      const int64_t request = mine.add(live_keys::kSnapshotRequest, 0);
      if (request > seen) {
        seen = request;
        const std::string dump = R"({"rank": 0, "meshrt_threads": []})";
        mine.set(live_keys::snapshot(request, 0), as_bytes(dump));
      }
      std::this_thread::sleep_for(20ms);
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  const Snapshots s = board.snapshots(700ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms);
  EXPECT_EQ(s.request, 1);
  ASSERT_EQ(s.by_rank.size(), 2u);
  EXPECT_EQ(json::parse(s.by_rank[0])["rank"], 0);
  EXPECT_TRUE(s.by_rank[1].empty());
  // Taken again within the reuse window: the same set, no new request.
  EXPECT_EQ(board.snapshots(700ms, 5000ms).request, 1);
  StatusServerOptions short_wait;
  short_wait.snapshot_wait = 300ms;
  short_wait.token = "t";
  const HttpReply r = answer_status_request(board, short_wait, "GET", "/ranks/1/stacks?token=t");
  EXPECT_EQ(r.status, 503);
  EXPECT_NE(r.body.find("rank 1 did not answer the snapshot request within 300 ms"),
            std::string::npos)
      << r.body;
  StatusServerOptions with_token;
  with_token.token = "t";
  EXPECT_EQ(answer_status_request(board, with_token, "GET", "/ranks/0/stacks?token=t").body,
            "rank 0:\n\n");
  EXPECT_EQ(answer_status_request(board, with_token, "GET", "/ranks/2/snapshot?token=t").status,
            404);
  stop = true;
  rank0.join();
}

TEST(MeshtraceLive, TextShowsVerdictRanksAndEvents) {
  auto board = stalled_board();
  board->add_event("stall 10 s: mesh0/tp all_reduce #37 (dim tp) — rank 1 has not entered it",
                   true);
  const std::string text = trace::format_live_status(board->status_json(wall_now_ns()));
  EXPECT_NE(text.find("job job42, attempt 0, 2 ranks; stall threshold 10.0 s; at "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("verdict: stall 10 s: mesh0/tp all_reduce #37 (dim tp) — rank 1 has not "
                      "entered it\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rank  state"), std::string::npos) << text;
  EXPECT_NE(text.find("mesh0/tp (dim tp)"), std::string::npos) << text;
  EXPECT_NE(text.find("\n0     in op for "), std::string::npos) << text;
  EXPECT_NE(text.find("all_reduce #37 running 5."), std::string::npos) << text;
  EXPECT_NE(text.find("\n1     user code for 4."), std::string::npos) << text;
  EXPECT_NE(text.find("idle, completed #36"), std::string::npos) << text;
  EXPECT_NE(text.find("events:\n  "), std::string::npos) << text;
  EXPECT_THROW(trace::format_live_status("[]"), trace::InputError);
  EXPECT_THROW(trace::format_live_status(R"({"run_id": "x"})"), trace::InputError);
}

TEST(MeshtraceLive, EndpointsParse) {
  auto at = trace::parse_http_endpoint("http://127.0.0.1:8080/?token=abc");
  EXPECT_EQ(at.host, "127.0.0.1");
  EXPECT_EQ(at.port, 8080);
  EXPECT_EQ(at.query, "token=abc");
  at = trace::parse_http_endpoint("localhost:9");
  EXPECT_EQ(at.host, "localhost");
  EXPECT_EQ(at.port, 9);
  EXPECT_EQ(at.query, "");
  at = trace::parse_http_endpoint("http://[::1]:80/");
  EXPECT_EQ(at.host, "::1");
  EXPECT_EQ(at.port, 80);
  for (const char* bad : {"", "host", "host:", ":80", "host:0", "host:70000", "host:8x"}) {
    EXPECT_THROW(trace::parse_http_endpoint(bad), trace::InputError) << bad;
  }
}

// `meshtrace live` finds the token in the URL, in meshrun's status_url file, or in
// MESHRT_STATUS_TOKEN (sent as a bearer token).
TEST(MeshtraceLive, TheTokenComesFromTheUrlTheFileOrTheEnvironment) {
  ::unsetenv("MESHRT_STATUS_TOKEN");
  auto at = trace::status_endpoint("http://127.0.0.1:8080/?token=abc");
  EXPECT_EQ(at.query, "token=abc");
  EXPECT_EQ(at.bearer, "");
  const std::string file = ::testing::TempDir() + "/status_url_" + std::to_string(::getpid());
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("http://127.0.0.1:9090/?token=fromfile\n", f);
    std::fclose(f);
  }
  at = trace::status_endpoint(file);
  EXPECT_EQ(at.port, 9090);
  EXPECT_EQ(at.query, "token=fromfile");
  std::remove(file.c_str());
  ::setenv("MESHRT_STATUS_TOKEN", "fromenv", 1);
  at = trace::status_endpoint("127.0.0.1:7");
  EXPECT_EQ(at.bearer, "fromenv");
  EXPECT_EQ(trace::status_endpoint("http://127.0.0.1:7/?token=url").bearer, "");
  ::unsetenv("MESHRT_STATUS_TOKEN");
}

TEST(MeshtraceLive, NoServerIsAClearError) {
  // A port just released by a server is closed.
  uint16_t port = 0;
  {
    auto board = stalled_board();
    StatusServer s({}, *board);
    port = s.port();
  }
  try {
    HttpEndpoint at;
    at.host = "127.0.0.1";
    at.port = port;
    http_get(at, "/status.json", 2000ms);
    ADD_FAILURE() << "a closed port answered";
  } catch (const trace::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("GET http://127.0.0.1:" + std::to_string(port) +
                                         "/status.json: Connection refused"),
              std::string::npos)
        << e.what();
  }
}

// Live stragglers: progress records of a 2 x 2 (dp x tp) mesh, one a second, with the op totals
// each rank would publish when rank 3 spends 600 ms more than the others in its own code every
// step: rank 2 waits for it in tp, rank 1 in dp, and rank 0 waits in dp for rank 2, which is late
// there only because it waited for rank 3.
class LiveStragglers : public ::testing::Test {
 protected:
  // Totals after `steps` one-second steps; `late` is rank 3's extra time in ms (0: balanced).
  static std::vector<std::string> records(int steps, double late_ms) {
    const double wait = late_ms / 1000, op = 0.01;
    // Per step: (tp exec s, dp exec s) by rank.
    const double per_step[4][2] = {{op, op + wait}, {op, op + wait}, {op + wait, op}, {op, op}};
    std::vector<std::string> out;
    for (int r = 0; r < 4; ++r) {
      const std::vector<int> tp = r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
      const std::vector<int> dp = r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3};
      json metrics = json::array();
      const char* names[2] = {"mesh0/tp", "mesh0/dp"};
      for (int c = 0; c < 2; ++c) {
        metrics.push_back({{"comm", names[c]},
                           {"op", "all_reduce"},
                           {"p2p", false},
                           {"ops", steps},
                           {"timed_ops", steps},
                           {"exec_seconds", per_step[r][c] * steps}});
      }
      out.push_back(json{
          {"rank", r},
          {"wall_ns", int64_t{1'000'000'000} * steps},
          {"state", "user_code"},
          {"comms",
           {{{"name", "mesh0/tp"}, {"mesh_dim", "tp"}, {"ranks", tp}},
            {{"name", "mesh0/dp"}, {"mesh_dim", "dp"}, {"ranks", dp}}}},
          {"metrics",
           metrics}}.dump());
    }
    return out;
  }
};

TEST_F(LiveStragglers, TheRankThatComputesLongerIsNamedNotTheOneThatWaitedForIt) {
  StragglerWatch watch;
  std::vector<Straggler> found;
  for (int step = 1; step <= 12; ++step) found = watch.add(records(step, 600));
  ASSERT_EQ(found.size(), 2u);
  for (const Straggler& s : found) {
    EXPECT_EQ(s.rank, 3) << describe(s);
    EXPECT_NEAR(s.late_ms, 600, 1) << describe(s);
    EXPECT_EQ(s.ops, 10) << describe(s);
  }
  EXPECT_EQ(describe(found[0]).substr(0, 44), "rank 3 arrives late at mesh0/dp (dim dp, ran")
      << describe(found[0]);
  EXPECT_NE(describe(found[1]).find("rank 3 arrives late at mesh0/tp (dim tp, ranks [2, 3]) by "
                                    "600 ms per collective on average over the last 10 s (10 "
                                    "ops): it spends 2% of its time in ops, its peers 62%"),
            std::string::npos)
      << describe(found[1]);
}

TEST_F(LiveStragglers, NobodyInABalancedJobOrBeforeTheWindowFills) {
  StragglerWatch watch;
  for (int step = 1; step <= 4; ++step) {
    EXPECT_TRUE(watch.add(records(step, 600)).empty()) << "after " << step << " s";
  }
  StragglerWatch balanced;
  for (int step = 1; step <= 12; ++step) EXPECT_TRUE(balanced.add(records(step, 5)).empty());
}

}  // namespace
}  // namespace meshrt::launcher
