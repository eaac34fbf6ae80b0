// The test binaries' main: doctest's, except that a test-case filter that matches nothing fails
// (exit 4). ctest runs each case as `-tc=<name>`; doctest alone passes a filter that selects no
// case, so a renamed case or a name ctest cannot pass through whole would pass having run nothing.
#pragma once
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

namespace dp::test {

inline int cases_run = -1;

struct CountCases : doctest::IReporter {
  explicit CountCases(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override { cases_run = static_cast<int>(s.numTestCasesPassingFilters); }
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

inline int run_doctest(int argc, char** argv) {
  doctest::Context ctx(argc, argv);
  const int rc = ctx.run();
  if (rc != 0 || ctx.shouldExit()) return rc;
  bool filtered = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    filtered |= a.rfind("-tc=", 0) == 0 || a.rfind("--test-case=", 0) == 0 || a.rfind("-sf=", 0) == 0 ||
                a.rfind("--source-file=", 0) == 0 || a.rfind("-ts=", 0) == 0 || a.rfind("--test-suite=", 0) == 0;
  }
  if (filtered && cases_run == 0) {
    std::fprintf(stderr, "error: the test-case filter matched no test case\n");
    return 4;
  }
  return rc;
}

}  // namespace dp::test

DOCTEST_REGISTER_LISTENER("count_cases", 1, dp::test::CountCases);
