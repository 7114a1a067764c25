// describe_exception, describe_current_exception: an exception's message, for the error reports
// of recovery, of the on_exception hook point and of a job of many processes.
#pragma once

#include <runhooks/detail/config.hpp>

#include <exception>
#include <string>
#include <string_view>

namespace runhooks::detail {

// what() of `error`, or a sentence saying it has no what().
inline std::string describe_exception(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

// what() of the exception being handled, or a sentence saying there is none or it has no what().
inline std::string describe_current_exception() {
  const std::exception_ptr error = std::current_exception();
  return error ? describe_exception(error) : "no exception";
}

// `message` without a leading "runhooks: <who>: ", where `who` names this process ("rank 2 of 4"):
// a rank's report line starts with it already, so an error that names the rank (as runhooks'
// errors of many processes do) is not named twice. Any other message is returned as it is.
inline std::string without_own_prefix(std::string message, std::string_view who) {
  const std::string prefix = "runhooks: " + std::string(who) + ": ";
  if (message.starts_with(prefix)) message.erase(0, prefix.size());
  return message;
}

}  // namespace runhooks::detail
