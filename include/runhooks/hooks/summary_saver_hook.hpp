// SummarySaverHook: writes fetched scalars and histograms to TensorBoard event files every N
// global steps or every N seconds.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cmath>
#include <concepts>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <memory>
#include <optional>
#include <ranges>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <runhooks/clock.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/hook_keys.hpp>
#include <runhooks/detail/no_constructor_fits.hpp>
#include <runhooks/detail/periodic_trigger.hpp>
#include <runhooks/keys.hpp>
#include <runhooks/session_run_args.hpp>
#include <runhooks/session_run_context.hpp>
#include <runhooks/summary/event_writer.hpp>
#include <runhooks/summary/detail/utf8.hpp>
#include <runhooks/summary/histogram.hpp>

namespace runhooks {

struct SummarySaverOptions {
  std::optional<std::int64_t> save_steps{};  // at least 1
  std::optional<double> save_secs{};         // greater than 0, at most 1e9

  // Exactly one of the two (TensorFlow's SecondOrStepTimer errors, naming our options):
  // std::invalid_argument, or a compile error when the options are constexpr.
  constexpr const SummarySaverOptions& validate() const {
    if (save_steps && save_secs) {
      if (std::is_constant_evaluated()) throw "Can not provide both every_secs and every_steps: SummarySaverOptions sets both save_steps and save_secs";
      throw std::invalid_argument(
          "Can not provide both every_secs and every_steps: SummarySaverOptions sets both "
          "save_steps=" + std::to_string(*save_steps) + " and save_secs=" +
          detail::format_number(*save_secs) + "; set one.");
    }
    if (!save_steps && !save_secs) {
      if (std::is_constant_evaluated()) throw "Either every_secs or every_steps should be provided: set SummarySaverOptions::save_steps or save_secs";
      throw std::invalid_argument(
          "Either every_secs or every_steps should be provided: set "
          "SummarySaverOptions::save_steps or save_secs.");
    }
    if (save_steps && *save_steps < 1) {
      if (std::is_constant_evaluated()) throw "runhooks: SummarySaverOptions::save_steps must be at least 1";
      throw std::invalid_argument("runhooks: SummarySaverOptions::save_steps must be at least 1, got " +
                                  std::to_string(*save_steps) + ".");
    }
    if (save_secs)
      detail::checked_secs("SummarySaverOptions::save_secs", *save_secs, 0.0,
                           /*min_exclusive=*/true);
    return *this;
  }
};

namespace detail {
// SummarySaverHook's catch-all constructor names it (detail/no_constructor_fits.hpp).
using summary_saver_hint =
    write_the_options_type<SummarySaverOptions, &SummarySaverOptions::save_steps,
                           &SummarySaverOptions::save_secs>;
}  // namespace detail

// The keys a SummarySaverHook writes as scalars (a number each) and as histograms (a number or a
// range of numbers each): runhooks::scalars<Loss, Accuracy>, runhooks::histograms<Weights>.
template <KeyType... Ks>
struct Scalars {};
template <KeyType... Ks>
inline constexpr Scalars<Ks...> scalars{};
template <KeyType... Ks>
struct Histograms {};
template <KeyType... Ks>
inline constexpr Histograms<Ks...> histograms{};

// One value of a summary: a scalar (TensorFlow's simple_value) or a histogram.
struct SummaryItem {
  std::string tag;
  std::variant<float, Histogram> value;
};

// Where a SummarySaverHook writes. Minimal complete definition:
//   void write_summary(const std::vector<SummaryItem>& values, std::int64_t step);
//   void write_session_start(std::int64_t step);   // SessionLog START
//   void flush();
// EventFileSummaryWriter is the one TensorFlow has (an event file in output_dir).
template <class W>
concept SummaryWriter = requires(W& w, const std::vector<SummaryItem>& values, std::int64_t step) {
  w.write_summary(values, step);
  w.write_session_start(step);
  w.flush();
};

// TensorFlow's summary writer for an output_dir: the directory's one event file
// (EventFileWriterCache, TensorFlow's FileWriterCache), taken in begin() where TensorFlow's hook
// gets its writer, and shared with every other hook or output writing to that directory in this
// process (StepCounterHook's SummaryOutput, CheckpointSaverHook), so that TensorBoard sees one
// file per run. Each summary is one event, in the file within the writer's flush_secs (2 s by
// default; `writer_options` may ask for a shorter one: EventFileWriterCache::get) and at end().
// The SessionLog START of a session is written once to the file, by the first hook to ask after
// begin(). Copies share the file. I/O failures follow EventFileWriter's rule: a directory or file
// that cannot be created throws (from the hook's begin()); a failed write is logged once and
// later events are dropped.
class EventFileSummaryWriter {
 public:
  explicit EventFileSummaryWriter(std::filesystem::path output_dir,
                                  std::optional<EventFileWriterOptions> writer_options = {})
      : output_dir_(std::move(output_dir)), writer_options_(writer_options) {
    if (writer_options_) writer_options_->validate();
  }

  // The hook's begin(): takes the directory's writer, and a session begins.
  void open() {
    acquire();
    writer_->begin_session();
  }
  void write_summary(const std::vector<SummaryItem>& values, std::int64_t step) {
    acquire();
    SummaryEncoder encoder;
    for (const SummaryItem& v : values) {
      if (const float* scalar = std::get_if<float>(&v.value))
        encoder.add_scalar(v.tag, *scalar);
      else
        encoder.add_histogram(v.tag, std::get<Histogram>(v.value));
    }
    writer_->add_event(encoder.what(), step);
  }
  void write_session_start(std::int64_t step) {
    acquire();
    writer_->add_session_start(step);
  }
  void flush() {
    if (writer_) writer_->flush();
  }

  const std::filesystem::path& output_dir() const noexcept { return output_dir_; }
  // The directory's shared writer, once begin() took it (do not close() it: others write there).
  EventFileWriter* writer() noexcept { return writer_.get(); }

 private:
  void acquire() {
    if (!writer_) writer_ = EventFileWriterCache::get(output_dir_, writer_options_);
  }

  std::filesystem::path output_dir_;
  std::optional<EventFileWriterOptions> writer_options_;
  std::shared_ptr<EventFileWriter> writer_;
};

namespace detail {
template <class T>
concept summary_scalar = std::is_arithmetic_v<T>;
template <class T>
concept summary_histogram =
    std::is_arithmetic_v<T> ||
    (std::ranges::input_range<const T&> &&
     std::is_arithmetic_v<std::remove_cvref_t<std::ranges::range_reference_t<const T&>>>);

// TensorFlow's HistogramSummary op: every value as a double; a NaN or an infinity is an error
// ("Nan in summary histogram for: <tag>", InvalidArgumentError in TensorFlow).
template <class T>
Histogram make_histogram(std::string_view tag, const T& values) {
  Histogram histogram;
  auto add = [&](double v) {
    if (!std::isfinite(v))
      throw std::invalid_argument("Nan in summary histogram for: " + std::string(tag));
    histogram.add(v);
  };
  if constexpr (std::is_arithmetic_v<T>)
    add(static_cast<double>(values));
  else
    for (const auto& v : values) add(static_cast<double>(v));
  return histogram;
}
}  // namespace detail

template <class ScalarList, class HistogramList, SummaryWriter Writer = EventFileSummaryWriter,
          Clock C = SteadyClock>
class SummarySaverHook;

// TensorFlow's SummarySaverHook, with the summary op replaced by keys: the scalar keys become
// Summary values with simple_value (what tf.compat.v1.summary.scalar writes), the histogram keys
// values with a HistogramProto (tf.compat.v1.summary.histogram, TensorFlow's buckets), all in
// one event per trigger, as a merged summary op gives.
//
// TensorFlow's rules: the first run after begin() always writes, preceded by SessionLog START at
// that step (once per session in a shared event file: see EventFileSummaryWriter); after that a
// run writes when TensorFlow's SecondOrStepTimer triggers for the step it will reach (the
// current global step + 1), so with save_steps=8 from 0 the summaries are at steps 1, 9, 17,
// 25; the summaries are stamped with the global step after the run; end() flushes. The keys
// are fetched only on the runs that write (runhooks::fetch<K>(false) on the others: the backend
// is not asked). Per silent step: one read of the global step (shared with
// the other hooks through the run context) and one compare with the next step that could
// write. With save_secs the clock is sampled (detail::PeriodicTrigger), so a summary is at most
// about 1/64 of a period late while the rate is steady.
//
// Differs from TensorFlow: the step the hook tests is the current global step + 1, read before
// the run, not the stale read + 1 of the previous run (the same under +1 per run); a global step
// that went back at a recovery lets the next run write at once (the timer's going-back rule);
// save_steps must be at least 1 and save_secs greater than 0.
template <KeyType... Ss, KeyType... Hs, SummaryWriter Writer, Clock C>
class SummarySaverHook<Scalars<Ss...>, Histograms<Hs...>, Writer, C> {
  static_assert(sizeof...(Ss) + sizeof...(Hs) > 0,
                "runhooks::SummarySaverHook needs at least one key to write: "
                "runhooks::scalars<Loss> and/or runhooks::histograms<Weights>");
  static_assert((detail::summary_scalar<typename Ss::value_type> && ...),
                "runhooks::SummarySaverHook: a scalar key's value_type must be a number; "
                "write ranges of numbers with runhooks::histograms<Key>.");
  static_assert((detail::summary_histogram<typename Hs::value_type> && ...),
                "runhooks::SummarySaverHook: a histogram key's value_type must be a number or "
                "a range of numbers (std::vector<float>, std::array<double, N>, ...).");
  // A key's name is its tag in the event file, where protobuf's parsers refuse any string that
  // is not UTF-8 (and TensorBoard then reads nothing after it): a compile error, not a file that
  // stops in the middle (EventFileWriter refuses such a tag at run time).
  static_assert((detail::is_utf8(key_name<Ss>()) && ...) && (detail::is_utf8(key_name<Hs>()) && ...),
                "runhooks::SummarySaverHook: a key's name is its summary tag and must be UTF-8; "
                "TensorBoard cannot read an event holding any other tag.");

 public:
  // `output` is the output_dir (for EventFileSummaryWriter) or the writer itself.
  template <class Output>
    requires std::constructible_from<Writer, Output&&>
  SummarySaverHook(SummarySaverOptions options, Output&& output, Scalars<Ss...>,
                   Histograms<Hs...> = {}, C clock = {})
      : options_(options.validate()), writer_(std::forward<Output>(output)),
        trigger_(options_.save_steps, options_.save_secs, std::move(clock)) {}
  template <class Output>
    requires std::constructible_from<Writer, Output&&>
  SummarySaverHook(SummarySaverOptions options, Output&& output, Scalars<Ss...> s, C clock)
      : SummarySaverHook(options, std::forward<Output>(output), s, Histograms<Hs...>{},
                         std::move(clock)) {}
  template <class Output>
    requires(sizeof...(Ss) == 0 && std::constructible_from<Writer, Output &&>)
  SummarySaverHook(SummarySaverOptions options, Output&& output, Histograms<Hs...> h,
                   C clock = {})
      : SummarySaverHook(options, std::forward<Output>(output), Scalars<>{}, h,
                         std::move(clock)) {}
  // Chosen when no other constructor fits, most often for braced options with a misspelt field:
  // the error names SummarySaverOptions and its fields (detail/no_constructor_fits.hpp).
  template <class Hint = detail::summary_saver_hint>
  explicit SummarySaverHook(...) = delete;  // Misspelt field? Write SummarySaverOptions{...} to see which

  // TensorFlow's begin(): the writer is opened and the next run is a first run again.
  void begin() {
    if constexpr (requires { writer_.open(); }) writer_.open();
    started_ = false;
    // TensorFlow keeps its timer but writes on the first run whatever it says, then updates it
    // at that step: the same as starting the timer afresh, which then triggers on the first run.
    trigger_.reset();
  }

  template <class Backend>
  void after_create_session(Backend& session) {
    static_assert(HasGlobalStep<Backend>,
                  "runhooks::SummarySaverHook needs a backend with `std::int64_t global_step() "
                  "const`; the backend type is named in this instantiation.");
    static_assert(detail::check_hook_keys<SummarySaverHook, Backend, Ss..., Hs...>());
    if constexpr (HasGlobalStep<Backend>) {
      const std::optional<std::int64_t> last = trigger_.last_triggered();
      if (last && static_cast<std::int64_t>(session.global_step()) < *last) trigger_.recheck();
    }
  }

  template <class Ctx>
  auto before_run(Ctx& run_context) {
    using Backend = std::remove_cvref_t<decltype(run_context.session())>;
    if constexpr (HasGlobalStep<Backend> && detail::fetches_all<Backend, Ss..., Hs...>) {
      const bool request = trigger_.due_after(run_context.global_step());
      return SessionRunArgs{runhooks::fetch<Ss>(request)..., runhooks::fetch<Hs>(request)...};
    }
  }

  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values& run_values) {
    using Backend = std::remove_cvref_t<decltype(run_context.session())>;
    // A key that a hook declared before this one produces (an EvaluationHook) comes only on its
    // evaluation steps: a run without all the keys saves nothing, and the save stays due.
    if constexpr (HasGlobalStep<Backend> && detail::fetches_all<Backend, Ss..., Hs...>)
      if ((run_values[Ss{}].has_value() && ...) && (run_values[Hs{}].has_value() && ...))
          [[unlikely]]
        save(run_context.global_step(), values_of(run_values));
  }

  template <class Backend>
  void end(Backend&) {
    writer_.flush();
  }

  const SummarySaverOptions& options() const noexcept { return options_; }
  Writer& writer() noexcept { return writer_; }
  C& clock() noexcept { return trigger_.clock(); }

 private:
  using values_type = KeyValues<Ss..., Hs...>;

  // Copied out of the step's values on the rare path only, so that the step's values need not
  // live in memory on the others.
  template <class Values>
  static values_type values_of(const Values& run_values) {
    return values_type(*run_values[Ss{}]..., *run_values[Hs{}]...);
  }

  [[gnu::noinline]] void save(std::int64_t global_step, const values_type& fetched) {
    if (!started_) {
      writer_.write_session_start(global_step);
      started_ = true;
    }
    trigger_.fire(global_step);
    std::vector<SummaryItem> values;
    values.reserve(sizeof...(Ss) + sizeof...(Hs));
    (values.push_back({std::string(key_name<Ss>()), static_cast<float>(fetched[Ss{}])}), ...);
    (values.push_back({std::string(key_name<Hs>()),
                       detail::make_histogram(key_name<Hs>(), fetched[Hs{}])}),
     ...);
    writer_.write_summary(values, global_step);
  }

  SummarySaverOptions options_;
  Writer writer_;
  detail::PeriodicTrigger<C> trigger_;
  bool started_ = false;
};

namespace detail {
// A path-like output is an output_dir; anything else is the writer.
template <class Output>
using summary_writer_for =
    std::conditional_t<std::is_convertible_v<Output, std::filesystem::path>, EventFileSummaryWriter,
                       std::remove_cvref_t<Output>>;
}  // namespace detail

template <class Output, KeyType... Ss>
SummarySaverHook(SummarySaverOptions, Output, Scalars<Ss...>)
    -> SummarySaverHook<Scalars<Ss...>, Histograms<>, detail::summary_writer_for<Output>>;
template <class Output, KeyType... Ss, Clock C>
SummarySaverHook(SummarySaverOptions, Output, Scalars<Ss...>, C)
    -> SummarySaverHook<Scalars<Ss...>, Histograms<>, detail::summary_writer_for<Output>, C>;
template <class Output, KeyType... Ss, KeyType... Hs>
SummarySaverHook(SummarySaverOptions, Output, Scalars<Ss...>, Histograms<Hs...>)
    -> SummarySaverHook<Scalars<Ss...>, Histograms<Hs...>, detail::summary_writer_for<Output>>;
template <class Output, KeyType... Ss, KeyType... Hs, Clock C>
SummarySaverHook(SummarySaverOptions, Output, Scalars<Ss...>, Histograms<Hs...>, C)
    -> SummarySaverHook<Scalars<Ss...>, Histograms<Hs...>, detail::summary_writer_for<Output>, C>;
template <class Output, KeyType... Hs>
SummarySaverHook(SummarySaverOptions, Output, Histograms<Hs...>)
    -> SummarySaverHook<Scalars<>, Histograms<Hs...>, detail::summary_writer_for<Output>>;
template <class Output, KeyType... Hs, Clock C>
SummarySaverHook(SummarySaverOptions, Output, Histograms<Hs...>, C)
    -> SummarySaverHook<Scalars<>, Histograms<Hs...>, detail::summary_writer_for<Output>, C>;

// Arguments that fit no guide above (braced options with a misspelt field, most often) deduce a
// hook whose one constructor is the deleted catch-all, so that the error names the options type
// and its fields (detail/no_constructor_fits.hpp). The keys are not known: there is no other.
template <class Hint = detail::summary_saver_hint>
SummarySaverHook(...) -> SummarySaverHook<Hint, Histograms<>>;
template <>
class SummarySaverHook<detail::summary_saver_hint, Histograms<>> {
 public:
  template <class Hint = detail::summary_saver_hint>
  explicit SummarySaverHook(...) = delete;  // Misspelt field? Write SummarySaverOptions{...} to see which
};

}  // namespace runhooks
