// describe_current_exception: the message of the exception being handled, for the error reports
// of a job of many processes (a rank that fails prints it before the job ends).
#pragma once

#include <runhooks/detail/config.hpp>

#include <exception>
#include <string>

namespace runhooks::detail {

// what() of the exception being handled, or a sentence saying there is none or it has no what().
inline std::string describe_current_exception() {
  const std::exception_ptr error = std::current_exception();
  if (!error) return "no exception";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

}  // namespace runhooks::detail
