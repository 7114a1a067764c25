// The per-run protocol of one hooked step (TensorFlow's HookedSessionTest, section 3 E of
// tf-semantics.md): fetch merging, per-hook results, feeds from hooks and caller in one step.
//
// TensorFlow cases not ported here:
//   E24 (part) options / run_metadata pass-through: runhooks has no RunOptions or RunMetadata;
//       only the fetch and feed pass-through is ported.
//   E30 testHooksFeedConflicts, E31 testHooksAndUserFeedConflicts: in runhooks a feed conflict
//       is a compile error, not a RuntimeError; tests/compile_fail/ covers them.
// Deliberate difference: TF's _HookedSession alone never calls begin() or after_create_session()
// (E25 counts 0 and 0); runhooks has no hook layer without the session, and MonitoredSession
// calls each once at construction, so the ports expect 1 and 1.
#include <doctest/doctest.h>

#include <type_traits>

#include <support/fakes.hpp>

using namespace fakes;
using runhooks::Feed;
using runhooks::Fetch;
using runhooks::SessionRunArgs;
using runhooks::SessionRunValues;

namespace {
struct CheckArgsType {
  bool checked = false;
  template <class Ctx>
  void before_run(Ctx& run_context) {
    using Original = std::remove_cvref_t<decltype(run_context.original_args())>;
    static_assert(std::is_same_v<Original, SessionRunArgs<Fetch<ATensor>>>);
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(run_context.session())>, FakeBackend>);
    checked = true;
  }
};

struct Mutator {
  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    run_context.session().var = 100.0;
  }
};
}  // namespace

TEST_CASE("E24 testRunPassesAllArguments: with no hooks the caller's fetch and feed reach the backend unchanged") {
  runhooks::MonitoredSession session{FakeBackend{}};
  const auto values =
      session.run(SessionRunArgs{runhooks::fetch<ATensor>(), runhooks::feed<FeedA>(51)});
  CHECK(*values[ATensor{}] == 0);
  const auto& backend = session.raw_session();
  REQUIRE(backend.fed.size() == 1);
  CHECK(backend.fed[0].a == 51);
  CHECK_FALSE(backend.fed[0].b.has_value());
  CHECK_FALSE(backend.fed[0].c.has_value());
}

TEST_CASE("E25 testCallsHooksBeginEnd: each hook sees the caller's args, the raw session and no results") {
  FakeHook<> mock_hook;
  FakeHook<> mock_hook2;
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(mock_hook), std::ref(mock_hook2)};
  const auto a_tensor = SessionRunArgs{runhooks::fetch<ATensor>()};
  session.run(a_tensor);

  for (FakeHook<>* hook : {&mock_hook, &mock_hook2}) {
    // results=None: a hook that requested nothing gets SessionRunValues of no fetch.
    static_assert(std::is_same_v<decltype(hook->last_run_values),
                                 std::optional<SessionRunValues<SessionRunArgs<>>>>);
    CHECK(hook->last_run_values.has_value());
    // original_args == SessionRunArgs(a_tensor): the very args the caller passed.
    CHECK(hook->last_original_args == &a_tensor);
    // session is sess: the raw backend.
    CHECK(hook->last_run_context_session == &session.raw_session());
    // TF counts begin 0 and after_create_session 0 for a bare _HookedSession (see top).
    CHECK(hook->call_counter.begin == 1);
    CHECK(hook->call_counter.after_create_session == 1);
    CHECK(hook->call_counter.before_run == 1);
    CHECK(hook->call_counter.after_run == 1);
    CHECK(hook->call_counter.end == 0);
  }
}

TEST_CASE("E25 testCallsHooksBeginEnd: the run context's original_args has the caller's type") {
  CheckArgsType hook;
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(hook)};
  session.run(SessionRunArgs{runhooks::fetch<ATensor>()});
  CHECK(hook.checked);
}

TEST_CASE("E26 testShouldStop: a hook's request_stop in after_run makes should_stop true") {
  FakeHook<> mock_hook;
  FakeHook<> mock_hook2;
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(mock_hook), std::ref(mock_hook2)};
  session.run(SessionRunArgs{runhooks::fetch<ATensor>()});
  CHECK_FALSE(session.should_stop());

  mock_hook.should_stop = true;
  session.run(SessionRunArgs{runhooks::fetch<ATensor>()});
  CHECK(session.should_stop());
}

TEST_CASE("E27 testFetchesHookRequests: one merged step, the caller gets [0], hook1 [5], hook2 [10]") {
  using Req1 = SessionRunArgs<Fetch<AnotherTensor>>;
  using Req2 = SessionRunArgs<Fetch<ThirdTensor>>;
  FakeHook<Req1> mock_hook;
  FakeHook<Req2> mock_hook2;
  mock_hook.request = Req1{runhooks::fetch<AnotherTensor>()};
  mock_hook2.request = Req2{runhooks::fetch<ThirdTensor>()};
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(mock_hook), std::ref(mock_hook2)};

  const auto output = session.run(SessionRunArgs{runhooks::fetch<ATensor>()});
  CHECK(*output[ATensor{}] == 0);
  REQUIRE(mock_hook.last_run_values.has_value());
  REQUIRE(mock_hook2.last_run_values.has_value());
  CHECK((*mock_hook.last_run_values)[AnotherTensor{}] == 5);
  CHECK((*mock_hook2.last_run_values)[ThirdTensor{}] == 10);
  CHECK(session.raw_session().runs == 1);  // a single Session.run
}

TEST_CASE("E27 testFetchesHookRequests: each hook's results hold only its own fetches") {
  using Req1 = SessionRunArgs<Fetch<AnotherTensor>>;
  using Values1 = SessionRunValues<Req1>;
  // A hook's SessionRunValues is indexed by its own keys only; another hook's key is not there.
  static_assert(requires(const Values1& v) { v[AnotherTensor{}]; });
  static_assert(std::is_same_v<decltype(std::declval<const Values1&>()[AnotherTensor{}]),
                               const std::optional<int>&>);
  // The caller's results: what run() returns for its own fetches.
  runhooks::MonitoredSession session{FakeBackend{}};
  using CallerValues = decltype(session.run(SessionRunArgs{runhooks::fetch<ATensor>()}));
  static_assert(std::is_same_v<CallerValues, SessionRunValues<SessionRunArgs<Fetch<ATensor>>>>);
  // A run without fetches returns nothing.
  static_assert(std::is_void_v<decltype(session.run())>);
  CHECK(session.raw_session().runs == 0);
}

TEST_CASE("E28 testOnlyHooksHaveFeeds: hook feeds a=5 and b=10, run(a + b) gives 15") {
  using Req1 = SessionRunArgs<Feed<FeedA>>;
  using Req2 = SessionRunArgs<Feed<FeedB>>;
  FakeHook<Req1> mock_hook;
  FakeHook<Req2> mock_hook2;
  mock_hook.request = Req1{runhooks::feed<FeedA>(5)};
  mock_hook2.request = Req2{runhooks::feed<FeedB>(10)};
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(mock_hook), std::ref(mock_hook2)};

  CHECK(*session.run(SessionRunArgs{runhooks::fetch<SumABC>()})[SumABC{}] == 15);
}

TEST_CASE("E29 testBothHooksAndUserHaveFeeds: hooks feed a, b and the user c=20 in one step, a + b + c gives 35") {
  using Req1 = SessionRunArgs<Feed<FeedA>>;
  using Req2 = SessionRunArgs<Feed<FeedB>>;
  FakeHook<Req1> mock_hook;
  FakeHook<Req2> mock_hook2;
  mock_hook.request = Req1{runhooks::feed<FeedA>(5)};
  mock_hook2.request = Req2{runhooks::feed<FeedB>(10)};
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(mock_hook), std::ref(mock_hook2)};

  const auto feed_dict = SessionRunArgs{runhooks::fetch<SumABC>(), runhooks::feed<FeedC>(20)};
  CHECK(*session.run(feed_dict)[SumABC{}] == 35);
  // The user's feeds are not changed by the merge (TF: len(feed_dict) == 1).
  CHECK(feed_dict.get<Feed<FeedC>>().value == 20);
  static_assert(!decltype(feed_dict)::has<Feed<FeedA>> && !decltype(feed_dict)::has<Feed<FeedB>>);
  // All three feeds reached the backend in one step.
  const auto& backend = session.raw_session();
  REQUIRE(backend.fed.size() == 1);
  CHECK(backend.fed[0].a == 5);
  CHECK(backend.fed[0].b == 10);
  CHECK(backend.fed[0].c == 20);
}

TEST_CASE("E27 (runhooks): a fetch switched off at run time gives no result for that step only") {
  using Req = SessionRunArgs<Fetch<AnotherTensor>>;
  FakeHook<Req> hook;
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(hook)};

  hook.request = Req{runhooks::fetch<AnotherTensor>(false)};
  session.run();
  REQUIRE(hook.last_run_values.has_value());
  CHECK_FALSE((*hook.last_run_values)[AnotherTensor{}].has_value());

  hook.request = Req{runhooks::fetch<AnotherTensor>(true)};
  session.run();
  CHECK((*hook.last_run_values)[AnotherTensor{}] == 5);

  // The caller's fetch too.
  const auto off = session.run(SessionRunArgs{runhooks::fetch<ATensor>(false)});
  CHECK_FALSE(off[ATensor{}].has_value());
  const auto on = session.run(SessionRunArgs{runhooks::fetch<ATensor>(true)});
  CHECK(on[ATensor{}] == 0);
}

TEST_CASE("E27 (runhooks): every fetch reads the step's state before any after_run changes it") {
  // TF fetches everything in the one Session.run, so no after_run can change what a hook got.
  using Req = SessionRunArgs<Fetch<Var>>;
  FakeHook<Req> reader;
  reader.request = Req{runhooks::fetch<Var>()};
  runhooks::MonitoredSession session{FakeBackend{}, Mutator{}, std::ref(reader)};
  const auto caller = session.run(SessionRunArgs{runhooks::fetch<Var>(), runhooks::feed<CallerAdd>(0.5)});
  CHECK(caller[Var{}] == 0.5);
  CHECK((*reader.last_run_values)[Var{}] == 0.5);
  CHECK(session.raw_session().var == 100.0);
}

TEST_CASE("E29 (runhooks): feeds apply to their own step only") {
  using Req = SessionRunArgs<Feed<FeedA>>;
  FakeHook<Req> hook;
  hook.request = Req{runhooks::feed<FeedA>(5)};
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(hook)};
  CHECK(*session.run(SessionRunArgs{runhooks::fetch<SumABC>(), runhooks::feed<FeedC>(20)})[SumABC{}] == 25);
  CHECK(*session.run(SessionRunArgs{runhooks::fetch<SumABC>()})[SumABC{}] == 5);
}

namespace {
struct CountingBackend {
  std::int64_t step = 0;
  mutable int reads = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  int fetch(AnotherTensor) const { return ++reads, 5; }
};
}  // namespace

TEST_CASE("E27 (runhooks): a key several requests fetch is read from the backend once per step") {
  // TF evaluates a fetched tensor once per Session.run, however many hooks name it.
  using Req = SessionRunArgs<Fetch<AnotherTensor>>;
  FakeHook<Req> first, off, second;
  first.request = Req{runhooks::fetch<AnotherTensor>()};
  off.request = Req{runhooks::fetch<AnotherTensor>(false)};
  second.request = Req{runhooks::fetch<AnotherTensor>()};
  runhooks::MonitoredSession session{CountingBackend{}, std::ref(off), std::ref(first), std::ref(second)};

  const auto caller = session.run(SessionRunArgs{runhooks::fetch<AnotherTensor>()});
  CHECK(session.raw_session().reads == 1);
  CHECK(caller[AnotherTensor{}] == 5);
  CHECK((*first.last_run_values)[AnotherTensor{}] == 5);
  CHECK((*second.last_run_values)[AnotherTensor{}] == 5);
  // A request whose fetch is off gets nothing, even though others read the key this step.
  CHECK_FALSE((*off.last_run_values)[AnotherTensor{}].has_value());

  session.run(SessionRunArgs{runhooks::fetch<AnotherTensor>(false)});
  CHECK(session.raw_session().reads == 2);  // the hooks still fetch it: one more read

  first.request = second.request = Req{runhooks::fetch<AnotherTensor>(false)};
  session.run();
  CHECK(session.raw_session().reads == 2);  // nobody asked: no read
}

TEST_CASE("E24 (runhooks): run() returns the same type whatever the caller feeds") {
  runhooks::MonitoredSession session{FakeBackend{}};
  auto values = session.run(SessionRunArgs{runhooks::fetch<SumABC>()});
  static_assert(std::is_same_v<decltype(values), SessionRunValues<SessionRunArgs<Fetch<SumABC>>>>);
  CHECK(values[SumABC{}] == 0);
  values = session.run(SessionRunArgs{runhooks::fetch<SumABC>(), runhooks::feed<FeedC>(20)});
  CHECK(values[SumABC{}] == 20);
}
