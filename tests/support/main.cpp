// The one doctest runner, linked into every unit test executable; test cases live in the topic
// files. An executable may hold several of them (tests/support/unity.py), each test running one
// file's test cases through --source-file: a filter that matches no test case (a renamed file)
// fails the test instead of passing with nothing run.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

namespace {

// Test cases that passed the filters in the last run; -1 before a run ends.
int matched = -1;

struct MatchCounter : doctest::IReporter {
  explicit MatchCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    matched = static_cast<int>(stats.numTestCasesPassingFilters);
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace

DOCTEST_REGISTER_LISTENER("match_counter", 1, MatchCounter);

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int failed = context.run();
  if (failed != 0 || context.shouldExit()) {
    return failed;
  }
  if (matched == 0) {
    std::fputs("doctest: no test case matched the filters (--source-file names a file that "
               "this executable does not hold?)\n",
               stderr);
    return 1;
  }
  return 0;
}
