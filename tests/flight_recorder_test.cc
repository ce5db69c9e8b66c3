// The flight recorder: ring wrap, states, sequence ids of collectives, p2p ops and batches, mesh
// and scope attribution, the JSON dump's fields, the pickle dump read back by Python's own
// pickle, on-demand dumps (API, SIGUSR1), and the watchdog's dump when an op times out.
#include "trace/flight_recorder.h"

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "mesh/device_mesh.h"
#include "mesh/meshrt.h"
#include "runtime/watchdog.h"
#include "trace/scope.h"

namespace meshrt {
namespace {

using nlohmann::json;
using trace::DumpFormat;
using trace::DumpReason;
using trace::FlightRecorder;

// A recorder of its own, registered as a sink for the test's lifetime.
class RecorderTest : public ::testing::Test {
 protected:
  void use(size_t capacity) {
    fr_ = std::make_shared<FlightRecorder>(trace::FlightRecorderOptions{capacity, "", {}});
    trace::add_sink(fr_);
  }
  void TearDown() override {
    if (fr_) trace::remove_sink(fr_.get());
  }
  json dump_json(int rank) const {
    return json::parse(fr_->render(rank, DumpFormat::kJson, DumpReason::kApi, nullptr));
  }
  std::shared_ptr<FlightRecorder> fr_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST_F(RecorderTest, RingKeepsTheNewestEntriesAndCountsTheDropped) {
  use(8);
  run_inproc(1, [](Communicator& world) {
    std::vector<float> x(4, 1.0f);
    for (int i = 0; i < 10; ++i) world.all_reduce(view(x))->wait();
  });
  const auto recs = fr_->records(0);
  ASSERT_EQ(recs.size(), 8u);
  for (size_t i = 0; i < recs.size(); ++i) {
    EXPECT_EQ(recs[i].collective_seq, i + 3);
    if (i > 0) {
      EXPECT_EQ(recs[i].record_id, recs[i - 1].record_id + 1);
    }
  }
  EXPECT_EQ(fr_->dropped(), 2u);
  const json d = dump_json(0);
  EXPECT_EQ(d["records_dropped"], 2);
  EXPECT_EQ(d["buffer_size"], 8);
  EXPECT_EQ(d["entries"].size(), 8u);
}

TEST_F(RecorderTest, SequenceIdsStatesAndNamesFollowPyTorch) {
  use(100);
  run_inproc(2, [](Communicator& world) {
    const int peer = 1 - world.rank();
    std::vector<float> x(6, 1.0f), y(6), big(12);
    world.all_reduce(view(x, {2, 3}))->wait();  // collective 1
    if (world.rank() == 0) {                    // p2p 1
      world.send(view(x), peer)->wait();
    } else {
      world.recv(view(y), peer)->wait();
    }
    world.barrier()->wait();  // collective 2
    std::vector<P2POp> batch = {{P2POp::Dir::kSend, view(x), peer, 0},
                                {P2POp::Dir::kRecv, view(y), peer, 0}};
    world.batch_isend_irecv(batch)->wait();        // p2p 2
    world.all_gather(view(x), view(big))->wait();  // collective 3
  });
  const json d = dump_json(0);
  const json& e = d["entries"];
  ASSERT_EQ(e.size(), 7u) << d.dump(1);
  struct Want {
    const char* name;
    int coll, p2p, op;
    const char* state;
    bool is_p2p;
  };
  const Want want[] = {
      {"inproc:all_reduce", 1, 0, 1, "completed", false},
      {"inproc:send 0->1", 1, 1, 2, "completed", true},
      {"inproc:all_reduce_barrier", 2, 1, 3, "completed", false},
      {"inproc:send 0->1", 2, 2, 4, "scheduled", true},
      {"inproc:recv 0<-1", 2, 2, 4, "scheduled", true},
      {"inproc:coalesced", 2, 2, 4, "completed", true},
      {"inproc:all_gather", 3, 2, 5, "completed", false},
  };
  for (size_t i = 0; i < e.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(e[i]["profiling_name"], want[i].name);
    EXPECT_EQ(e[i]["collective_seq_id"], want[i].coll);
    EXPECT_EQ(e[i]["p2p_seq_id"], want[i].p2p);
    EXPECT_EQ(e[i]["op_id"], want[i].op);
    EXPECT_EQ(e[i]["state"], want[i].state);
    EXPECT_EQ(e[i]["is_p2p"], want[i].is_p2p);
    EXPECT_EQ(e[i]["process_group"], json::array({"world", "default_pg"}));
    EXPECT_EQ(e[i]["retired"], std::string(want[i].state) == "completed");
    EXPECT_EQ(e[i].contains("duration_ms"), std::string(want[i].state) == "completed");
    EXPECT_GT(e[i]["time_created_ns"].get<int64_t>(), 0);
  }
  EXPECT_EQ(e[0]["input_sizes"], json::parse("[[2, 3]]"));
  EXPECT_EQ(e[0]["input_dtypes"], json::parse(R"(["Float"])"));
  EXPECT_EQ(e[0]["reduce_op"], "sum");
  EXPECT_EQ(e[6]["output_sizes"], json::parse("[[12]]"));
  EXPECT_EQ(e[2]["input_sizes"], json::array());
  // Channel sequence numbers count per (peer, direction) across single and batched ops.
  EXPECT_EQ(e[1]["peer"], 1);
  EXPECT_EQ(e[1]["p2p_channel_seq"], 1);
  EXPECT_EQ(e[3]["p2p_channel_seq"], 2);
  EXPECT_EQ(e[4]["p2p_channel_seq"], 1);
  EXPECT_EQ(e[5]["input_sizes"], json::array());
  // The receiving side names its peer the other way round.
  const json d1 = dump_json(1);
  EXPECT_EQ(d1["entries"][1]["profiling_name"], "inproc:recv 1<-0");
  EXPECT_EQ(d1["entries"][1]["p2p_channel_seq"], 1);
  EXPECT_NE(e[0]["caller"].get<std::string>().find("flight_recorder_test.cc:"), std::string::npos);
  // pg_status follows the last collective.
  const json& status = d["pg_status"].begin().value();
  EXPECT_EQ(status["last_enqueued_collective"], "3");
  EXPECT_EQ(status["last_completed_collective"], "3");
}

TEST_F(RecorderTest, FailedOpIsRetiredButNotCompletedAndCarriesItsError) {
  use(16);
  InprocOptions options;
  options.timeout = std::chrono::milliseconds(200);
  EXPECT_THROW(run_inproc(
                   2,
                   [](Communicator& world) {
                     std::vector<float> x(4);
                     if (world.rank() == 0) world.recv(view(x), 1)->wait();
                   },
                   options),
               Error);
  const json d = dump_json(0);
  ASSERT_EQ(d["entries"].size(), 1u);
  const json& e = d["entries"][0];
  EXPECT_EQ(e["state"], "started");
  EXPECT_EQ(e["retired"], true);
  EXPECT_EQ(e["time_discovered_completed_ns"], 0);
  EXPECT_NE(e["error"].get<std::string>().find("[timeout]"), std::string::npos) << e["error"];
}

TEST_F(RecorderTest, EntriesNameTheirMeshDimScopeAndGroup) {
  use(200);
  run_inproc(4, [](Communicator&) {
    auto mesh = init_device_mesh({2, 2}, {"dp", "tp"});
    std::vector<float> x(4, 1.0f);
    mesh->comm("dp").all_reduce(view(x))->wait();
    trace::Scope scope("MLP.fc2", trace::Phase::kForward);
    mesh->comm("tp").all_reduce(view(x))->wait();
  });
  const json d = dump_json(3);
  const json& last = d["entries"].back();
  EXPECT_EQ(last["mesh_dim"], "tp");
  EXPECT_EQ(last["scope"], "MLP.fc2 / forward");
  EXPECT_EQ(last["group_ranks"], json::array({2, 3}));
  EXPECT_EQ(last["group_rank"], 1);
  EXPECT_EQ(last["process_group"][1], "mesh_tp");
  const std::string group = last["process_group"][0];
  EXPECT_EQ(d.at("pg_config").at(group).at("ranks"), "[2, 3]");
  EXPECT_EQ(d.at("pg_config").at(group).at("mesh_dim"), "tp");
  EXPECT_EQ(d.at("mesh_dims").at("dp").at("group_ranks"), json::array({1, 3}));
  EXPECT_EQ(d["rank"], 3);
}

// Python's own unpickler must read the pickle dump into the same data as the JSON dump, with
// PyTorch's types: a tuple for process_group and None for unknown discovery times.
TEST_F(RecorderTest, PickleDumpReadsBackInPythonAsTheJsonDump) {
  if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  use(64);
  InprocOptions options;
  options.timeout = std::chrono::milliseconds(200);
  try {
    run_inproc(
        2,
        [](Communicator& world) {
          std::vector<double> x(3, 1.5);
          world.all_reduce(view(x))->wait();
          world.broadcast(view(x), 1)->wait();
          if (world.rank() == 0) world.recv(view(x), 1)->wait();  // fails: nobody sends
        },
        options);
  } catch (const Error&) {
  }
  const auto dir =
      std::filesystem::temp_directory_path() / ("fr_pickle_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string pkl = (dir / "dump.pkl").string();
  std::ofstream(pkl, std::ios::binary)
      << fr_->render(0, DumpFormat::kPickle, DumpReason::kApi, nullptr);
  const std::string out = (dir / "out.json").string();
  const std::string script =
      "import json, pickle, sys\n"
      "d = pickle.load(open(sys.argv[1], 'rb'))\n"
      "e = d['entries']\n"
      "assert all(isinstance(x['process_group'], tuple) for x in e)\n"
      "assert e[-1]['time_discovered_completed_ns'] is None\n"
      "assert isinstance(e[0]['duration_ms'], float) and isinstance(e[0]['time_created_ns'], int)\n"
      "f = e[0]['frames'][0]\n"
      "assert f['filename'].endswith('flight_recorder_test.cc') and f['line'] > 0, f\n"
      "for x in e:\n"
      "  del x['frames']\n"
      "  for k in ('time_discovered_started_ns', 'time_discovered_completed_ns'):\n"
      "    x[k] = x[k] or 0\n"
      "json.dump(d, open(sys.argv[2], 'w'))\n";
  const std::string py = (dir / "check.py").string();
  std::ofstream(py) << script;
  const std::string cmd = "/usr/bin/python3 " + py + " " + pkl + " " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  json from_pickle = json::parse(read_file(out));
  json from_json = dump_json(0);
  // The two renders read the clock, and capture the threads' stacks, at different times.
  for (const char* moment : {"clock", "meshrt_threads"}) {
    EXPECT_TRUE(from_pickle.contains(moment)) << moment;
    from_pickle.erase(moment);
    from_json.erase(moment);
  }
  EXPECT_EQ(from_pickle, from_json);
  EXPECT_EQ(from_json["entries"].size(), 3u);
  std::filesystem::remove_all(dir);
}

// Names and error texts come from users and libraries: invalid UTF-8 must not cost the dump.
TEST_F(RecorderTest, InvalidUtf8IsReplacedInBothFormats) {
  use(4);
  auto comm = std::make_shared<trace::CommInfo>();
  comm->name = "bad\xffname";
  comm->backend = "inproc";
  comm->global_ranks = {0};
  comm->rank = comm->global_rank = 0;
  trace::OpRecord r;
  r.record_id = 1;
  r.comm = comm;
  r.op = "all_reduce";
  r.error = "lost \xc3 byte";
  fr_->on_enqueue(r);
  const json d = dump_json(0);
  EXPECT_EQ(d["entries"][0]["process_group"][0], "bad\xef\xbf\xbdname");
  if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  const auto path =
      std::filesystem::temp_directory_path() / ("fr_utf8_" + std::to_string(getpid()));
  std::ofstream(path, std::ios::binary)
      << fr_->render(0, DumpFormat::kPickle, DumpReason::kApi, nullptr);
  const std::string cmd =
      "/usr/bin/python3 -c \"import pickle,sys; d=pickle.load(open(sys.argv[1],'rb')); "
      "assert d['entries'][0]['process_group'][0]=='bad\\ufffdname'\" " +
      path.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  std::filesystem::remove(path);
}

// A registered DumpWriter receives every local rank's dump instead of the file writer.
TEST_F(RecorderTest, DumpsGoThroughTheRegisteredWriter) {
  use(8);
  struct Capture : trace::DumpWriter {
    std::optional<std::string> write(int rank, const std::string& bytes) override {
      dumps[rank] = bytes;
      return "memory:" + std::to_string(rank);
    }
    std::map<int, std::string> dumps;
  };
  auto capture = std::make_shared<Capture>();
  fr_->set_writer(capture);
  run_inproc(2, [](Communicator& world) { world.barrier()->wait(); });
  // The worlds are gone: the ranks come from the retained records.
  EXPECT_EQ(fr_->dump(DumpReason::kApi), (std::vector<std::string>{"memory:0", "memory:1"}));
  ASSERT_EQ(capture->dumps.size(), 2u);
  EXPECT_EQ(json::parse(capture->dumps[1])["rank"], 1);
  EXPECT_EQ(json::parse(capture->dumps[1])["entries"][0]["profiling_name"],
            "inproc:all_reduce_barrier");
}

TEST(FlightRecorderDumps, ApiAndSigusr1WriteSelfDescribingFilesAtomically) {
  auto& fr = FlightRecorder::instance();
  ASSERT_TRUE(fr.enabled());
  auto world = make_inproc_world(1);  // Keeps rank 0 local and the watchdog running.
  std::vector<float> x(2, 1.0f);
  world[0]->all_reduce(view(x))->wait();
  const std::string path = fr.options().dump_prefix + "0";
  std::filesystem::remove(path);

  const auto paths = trace::dump_flight_recorder();
  ASSERT_EQ(paths, std::vector<std::string>{path});
  json d = json::parse(read_file(path));
  for (const char* key : {"version", "meshrt_dump_version", "producer", "comm_lib_version", "rank",
                          "world_size", "host", "pid", "run_id", "dump_reason", "trigger", "clock",
                          "pg_config", "pg_status", "entries"}) {
    EXPECT_TRUE(d.contains(key)) << key;
  }
  EXPECT_EQ(d["dump_reason"], "api");
  EXPECT_EQ(d["pid"], getpid());
  for (const auto& f :
       std::filesystem::directory_iterator(std::filesystem::path(path).parent_path())) {
    EXPECT_EQ(f.path().string().find(".tmp."), std::string::npos) << f.path();
  }

  std::filesystem::remove(path);
  ASSERT_EQ(std::raise(SIGUSR1), 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!std::filesystem::exists(path) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(std::filesystem::exists(path)) << "no dump within 5 s of SIGUSR1";
  EXPECT_EQ(json::parse(read_file(path))["dump_reason"], "signal");
}

// A watchdog stuck (in a backend or store call) is caught by the heartbeat monitor, which dumps
// and ends the process. In a child process: the monitor exits.
TEST(WatchdogDeathTest, HeartbeatMonitorDumpsAndExitsWhenTheWatchdogIsStuck) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string dump = FlightRecorder::instance().options().dump_prefix + "0";
  std::filesystem::remove(dump);
  EXPECT_EXIT(
      {
        setenv("MESHRT_HEARTBEAT_TIMEOUT_MS", "300", 1);
        auto world = make_inproc_world(1);
        Watchdog::instance().stall_for_testing(std::chrono::seconds(20));
        std::this_thread::sleep_for(std::chrono::seconds(20));
      },
      ::testing::ExitedWithCode(kWatchdogExitCode), "the watchdog has not made progress");
  ASSERT_TRUE(std::filesystem::exists(dump));
  EXPECT_EQ(json::parse(read_file(dump))["dump_reason"], "heartbeat");
}

}  // namespace
}  // namespace meshrt

namespace meshrt {
namespace {

// Coalescing on a run-to-completion backend: members run as usual, the closing entry completes
// once they did, and the dump reads like PyTorch's (members sharing one collective_seq_id, then
// a closing "coalesced" entry).
TEST_F(RecorderTest, CoalescedGroupRecordsMembersThenClosingEntry) {
  use(64);
  run_inproc(2, [](Communicator& world) {
    std::vector<float> a(4, 1.0f), b(8, 2.0f);
    world.barrier()->wait();
    world.start_coalescing();
    auto w1 = world.all_reduce(view(a));
    auto w2 = world.all_reduce(view(b), ReduceOp::kMax);
    WorkHandle closing = world.end_coalescing();
    closing->wait();
    EXPECT_TRUE(w1->test());
    EXPECT_TRUE(w2->test());
    EXPECT_EQ(a[0], 2.0f);
    EXPECT_EQ(b[0], 2.0f);
    EXPECT_EQ(closing->record().op, "coalesced");
    EXPECT_EQ(closing->record().state, trace::OpState::kCompleted);
    // The block counted once; the next collective counts on from it.
    EXPECT_EQ(world.collective_seq(), 2u);
    world.all_reduce(view(a))->wait();
    EXPECT_EQ(world.collective_seq(), 3u);
    EXPECT_THROW(world.end_coalescing(), Error);
    world.start_coalescing();
    EXPECT_THROW(world.start_coalescing(), Error);
    world.end_coalescing()->wait();  // An empty block completes at once.
  });
  const json d = dump_json(0);
  std::vector<std::pair<std::string, int64_t>> seen;
  for (const auto& e : d["entries"]) {
    seen.emplace_back(e["profiling_name"].get<std::string>(),
                      e["collective_seq_id"].get<int64_t>());
  }
  ASSERT_GE(seen.size(), 5u);
  EXPECT_EQ(seen[1], (std::pair<std::string, int64_t>{"inproc:all_reduce", 2}));
  EXPECT_EQ(seen[2], (std::pair<std::string, int64_t>{"inproc:all_reduce", 2}));
  EXPECT_EQ(seen[3], (std::pair<std::string, int64_t>{"inproc:coalesced", 2}));
  EXPECT_EQ(d["entries"][3]["state"], "completed");
  EXPECT_EQ(seen[4], (std::pair<std::string, int64_t>{"inproc:all_reduce", 3}));
  EXPECT_TRUE(d.contains("device"));
  EXPECT_TRUE(d["device"].is_null());
}

// A failed member fails the closing entry, naming the member.
TEST_F(RecorderTest, CoalescedGroupFailsWithItsMember) {
  use(64);
  auto world = make_inproc_world(2, {.name = "world", .timeout = std::chrono::milliseconds(300)});
  std::thread peer([&] { world[1]->barrier()->wait(); });
  Communicator& c = *world[0];
  c.barrier()->wait();
  peer.join();
  c.start_coalescing();
  std::vector<float> a(4, 1.0f);
  auto member = c.all_reduce(view(a));  // Rank 1 never joins: it times out.
  auto closing = c.end_coalescing();
  try {
    closing->wait();
    ADD_FAILURE() << "the closing entry did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("member all_reduce"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("coalesced"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(member->error().has_value());
}

}  // namespace
}  // namespace meshrt
