// ProfilerHook: every N global steps or every N seconds, times one step span by span (each
// hook's callbacks, the backend's step and its fetches) and writes it as a Chrome trace.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <runhooks/clock.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/no_constructor_fits.hpp>
#include <runhooks/detail/periodic_trigger.hpp>
#include <runhooks/detail/type_name.hpp>
#include <runhooks/log.hpp>
#include <runhooks/session_run_context.hpp>

namespace runhooks {

struct ProfilerOptions {
  std::optional<std::int64_t> save_steps{};  // at least 1
  std::optional<double> save_secs{};         // greater than 0, at most 1e9

  // Exactly one of the two (TensorFlow's SecondOrStepTimer errors, naming our options):
  // std::invalid_argument, or a compile error when the options are constexpr.
  constexpr const ProfilerOptions& validate() const {
    if (save_steps && save_secs) {
      if (std::is_constant_evaluated()) throw "Can not provide both every_secs and every_steps: ProfilerOptions sets both save_steps and save_secs";
      throw std::invalid_argument(
          "Can not provide both every_secs and every_steps: ProfilerOptions sets both "
          "save_steps=" + std::to_string(*save_steps) + " and save_secs=" +
          detail::format_number(*save_secs) + "; set one.");
    }
    if (!save_steps && !save_secs) {
      if (std::is_constant_evaluated()) throw "Either every_secs or every_steps should be provided: set ProfilerOptions::save_steps or save_secs";
      throw std::invalid_argument(
          "Either every_secs or every_steps should be provided: set ProfilerOptions::save_steps "
          "or save_secs.");
    }
    if (save_steps && *save_steps < 1) {
      if (std::is_constant_evaluated()) throw "runhooks: ProfilerOptions::save_steps must be at least 1";
      throw std::invalid_argument("runhooks: ProfilerOptions::save_steps must be at least 1, got " +
                                  std::to_string(*save_steps) + ".");
    }
    if (save_secs)
      detail::checked_secs("ProfilerOptions::save_secs", *save_secs, 0.0, /*min_exclusive=*/true);
    return *this;
  }
};

namespace detail {

// One timed callback of a profiled step, in seconds of the steady clock.
struct TraceSpan {
  std::string_view who;   // the hook's or backend's type name (static storage)
  std::string_view what;  // "before_run", "run", "fetch", "after_run"
  double begin;
  double end;
};

inline void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
          out += escaped;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

inline void append_micros(std::string& out, double secs) {
  char text[40];
  std::snprintf(text, sizeof text, "%.3f", secs * 1e6);
  out += text;
}

// The Chrome trace-event JSON of one step (the format chrome://tracing and Perfetto load): a
// complete event ("ph": "X") for the whole step, named "step <global step>", and one inside it
// for every span, in order; times in microseconds from the step's start. Spans of one step follow
// each other, so they nest in the step's event.
inline std::string chrome_trace(std::int64_t global_step, const std::vector<TraceSpan>& spans) {
  double first = 0.0, last = 0.0;
  for (std::size_t i = 0; i < spans.size(); ++i) {
    if (i == 0 || spans[i].begin < first) first = spans[i].begin;
    if (i == 0 || spans[i].end > last) last = spans[i].end;
  }
  const std::string step = std::to_string(global_step);
  std::string out;
  out += "{\"displayTimeUnit\": \"ms\",\n \"otherData\": {\"producer\": \"runhooks::ProfilerHook\", "
         "\"global_step\": " + step + "},\n \"traceEvents\": [\n";
  out += "  {\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 1, \"args\": "
         "{\"name\": \"runhooks\"}},\n";
  out += "  {\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 1, \"args\": "
         "{\"name\": \"MonitoredSession\"}},\n";
  out += "  {\"name\": \"step " + step + "\", \"cat\": \"step\", \"ph\": \"X\", \"ts\": 0.000, "
         "\"dur\": ";
  append_micros(out, last - first);
  out += ", \"pid\": 1, \"tid\": 1, \"args\": {\"global_step\": " + step + "}}";
  for (const TraceSpan& span : spans) {
    out += ",\n  {\"name\": ";
    std::string name(span.who);
    name += "::";
    name += span.what;
    append_json_string(out, name);
    out += ", \"cat\": ";
    append_json_string(out, span.what == "run" || span.what == "fetch" ? "backend" : "hook");
    out += ", \"ph\": \"X\", \"ts\": ";
    append_micros(out, span.begin - first);
    out += ", \"dur\": ";
    append_micros(out, span.end > span.begin ? span.end - span.begin : 0.0);
    out += ", \"pid\": 1, \"tid\": 1, \"args\": {\"who\": ";
    append_json_string(out, span.who);
    out += ", \"what\": ";
    append_json_string(out, span.what);
    out += "}}";
  }
  out += "\n ]}\n";
  return out;
}

}  // namespace detail

// TensorFlow's ProfilerHook, on runhooks' StepProfiler concept: it never profiles the first run
// after begin(), which starts its timer at the global step the session was created with; after
// that a run is profiled when TensorFlow's SecondOrStepTimer triggers for the step it will
// reach (the global step + 1), so with save_steps=2 from 0 the traces are of steps 2, 4, 6. On a
// profiled step the session reads the steady clock around every hook callback (before_run and
// after_run of each hook, this one's included), the backend's run() and its fetches, and the
// hook writes them to output_dir/timeline-<global step after the step>.json as Chrome trace
// events (chrome://tracing, https://ui.perfetto.dev), logging TensorFlow's line
// "Saving timeline for <step> into '<path>'.".
//
// The file is written during the profiled run, as TensorFlow writes it, as soon as the session
// reports this hook's own after_run span; the after_run spans of the hooks after this one come
// later, so the file is written once more, complete, when the next step starts (or in end(), or
// when the hook is destroyed). A profiled run that fails leaves no file. A silent step costs
// the session's call to profile_this_step() (one compare of the predicted step with the next
// one that could be profiled) and the store of that prediction in after_run. With save_secs the
// clock is sampled (detail::PeriodicTrigger).
//
// Differs from TensorFlow: there is no RunMetadata (a backend has no TensorFlow step stats), so
// the spans are the callbacks' and the backend's, not the ops'; save_steps must be at least 1
// and save_secs greater than 0. I/O: output_dir is created in begin() (a failure throws
// std::system_error or std::filesystem::filesystem_error); a trace that cannot be written is
// logged (warning) and skipped.
template <Clock C = SteadyClock>
class ProfilerHook {
 public:
  explicit ProfilerHook(ProfilerOptions options, std::filesystem::path output_dir = ".",
                        C clock = {})
      : options_(options.validate()), output_dir_(std::move(output_dir)),
        trigger_(options_.save_steps, options_.save_secs, std::move(clock)) {}
  ProfilerHook(ProfilerOptions options, C clock)
    requires(!std::is_convertible_v<C, std::filesystem::path>)
      : ProfilerHook(options, ".", std::move(clock)) {}
  // Chosen when no other constructor fits, most often for braced options with a misspelt field:
  // the error names ProfilerOptions and its fields (detail/no_constructor_fits.hpp).
  template <class Hint = detail::write_the_options_type<
                ProfilerOptions, &ProfilerOptions::save_steps, &ProfilerOptions::save_secs>>
  explicit ProfilerHook(...) = delete;  // Misspelt field? Write ProfilerOptions{...} to see which

  ProfilerHook(ProfilerHook&&) noexcept = default;
  ProfilerHook& operator=(ProfilerHook&&) noexcept = default;
  ProfilerHook(const ProfilerHook& other)
      : options_(other.options_), output_dir_(other.output_dir_), trigger_(other.trigger_) {}
  ~ProfilerHook() {
    try {
      write_pending();
    } catch (...) {  // the log sink threw, or out of memory: nothing more can be said
    }
  }

  // TensorFlow's begin(): the next run is a first run again (not profiled).
  void begin() {
    std::filesystem::create_directories(output_dir_);
    started_ = false;
    last_step_ = never;
    trigger_.recheck();
  }

  template <class Backend>
  void after_create_session(Backend& session) {
    static_assert(HasGlobalStep<Backend>,
                  "runhooks::ProfilerHook needs a backend with `std::int64_t global_step() "
                  "const`; the backend type is named in this instantiation.");
    if constexpr (HasGlobalStep<Backend>) {
      const auto step = static_cast<std::int64_t>(session.global_step());
      if (!started_) {
        first_step_ = step;
      } else if (const auto last = trigger_.last_triggered(); last && step < *last) {
        trigger_.recheck();
      }
    }
  }

  // Called by the session before each step: TensorFlow's timer.should_trigger_for_step(the
  // global step + 1), tested as one compare of the global step after the previous run.
  bool profile_this_step() {
    if (last_step_ >= trigger_.next_check_before()) [[unlikely]]
      return decide();
    return false;
  }

  // Called by the session on a profiled step, once per callback, in order.
  void record_span(std::string_view who, std::string_view what, double begin_secs,
                   double end_secs) {
    if (!pending_) return;
    pending_->spans.push_back({who, what, begin_secs, end_secs});
    // This hook's after_run has set last_step_: the step is known, and all spans but the later
    // hooks' after_run are in.
    if (what == "after_run" && who == detail::type_name<ProfilerHook>() && !pending_->step) {
      pending_->step = last_step_;
      write(*pending_, /*first=*/true);
    }
  }

  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    if constexpr (HasGlobalStep<std::remove_cvref_t<decltype(run_context.session())>>)
      last_step_ = run_context.global_step();
  }

  template <class Backend>
  void end(Backend&) {
    write_pending();
  }

  const ProfilerOptions& options() const noexcept { return options_; }
  const std::filesystem::path& output_dir() const noexcept { return output_dir_; }
  // The traces written so far, in order.
  const std::vector<std::filesystem::path>& written() const noexcept { return written_; }
  C& clock() noexcept { return trigger_.clock(); }

 private:
  static constexpr std::int64_t never = std::numeric_limits<std::int64_t>::min();

  struct Trace {
    std::vector<detail::TraceSpan> spans;
    std::optional<std::int64_t> step;  // set once written during its run
  };

  [[gnu::noinline]] bool decide() {
    write_pending();
    if (!started_) {
      // TensorFlow's first after_run: the timer starts at the step before the first run, and
      // nothing is profiled until save_steps steps or save_secs seconds later.
      started_ = true;
      trigger_.fire(first_step_);
      return false;
    }
    const std::int64_t next_step = detail::saturating_add(last_step_, 1);
    if (!trigger_.due(next_step)) return false;
    trigger_.fire(next_step);
    pending_ = std::make_unique<Trace>();
    pending_->spans.reserve(64);
    trigger_.recheck();  // the next step comes back here to write the trace
    return true;
  }

  // The trace of the last profiled run, complete now, written again; nothing if that run failed.
  void write_pending() {
    if (!pending_) return;
    const std::unique_ptr<Trace> trace = std::move(pending_);
    if (trace->step) write(*trace, /*first=*/false);
  }

  void write(const Trace& trace, bool first) {
    const std::int64_t step = *trace.step;
    const std::filesystem::path path = output_dir_ / ("timeline-" + std::to_string(step) + ".json");
    if (first)
      log(Severity::info, "Saving timeline for " + std::to_string(step) + " into '" +
                              path.string() + "'.");
    const std::string json = detail::chrome_trace(step, trace.spans);
    errno = 0;
    std::FILE* file = std::fopen(path.string().c_str(), "wb");
    bool ok = file != nullptr;
    if (ok) ok = std::fwrite(json.data(), 1, json.size(), file) == json.size();
    if (file != nullptr && std::fclose(file) != 0) ok = false;
    if (!ok) {
      const std::error_code error(errno != 0 ? errno : EIO, std::generic_category());
      log(Severity::warning, "runhooks::ProfilerHook: cannot write " + path.string() + ": " +
                                 error.message() + "; this trace is skipped.");
      return;
    }
    if (first) written_.push_back(path);
  }

  ProfilerOptions options_;
  std::filesystem::path output_dir_;
  detail::PeriodicTrigger<C> trigger_;
  std::int64_t last_step_ = never;  // the global step after the last run (+ 1: the next one's)
  std::int64_t first_step_ = 0;
  bool started_ = false;
  std::unique_ptr<Trace> pending_;
  std::vector<std::filesystem::path> written_;
};

}  // namespace runhooks
