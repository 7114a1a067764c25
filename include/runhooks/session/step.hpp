// The merged step: every before_run, the feeds of the hooks and the caller, the backend's step,
// each fetched key read once and handed to every request that named it, every after_run (a key
// a hook produces handed to the hooks after it just before theirs), and the compile-time checks
// of the step's merged shape. TensorFlow's _HookedSession.run.
#pragma once

#include <runhooks/detail/config.hpp>

#include <boost/hana/at.hpp>
#include <boost/hana/basic_tuple.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/unpack.hpp>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include <runhooks/concepts.hpp>
#include <runhooks/detail/hook_checks.hpp>
#include <runhooks/detail/hot_path.hpp>
#include <runhooks/detail/type_list.hpp>
#include <runhooks/detail/type_name.hpp>
#include <runhooks/log.hpp>
#include <runhooks/session_run_args.hpp>
#include <runhooks/session_run_context.hpp>

namespace runhooks::detail {

// Named calls keep the backend's feed() and fetch() dependent, so a backend without them
// compiles as long as no one feeds or fetches. A key the backend lacks is reported once, by
// check_backend_keys; the calls then compile to nothing instead of a second error.
template <class B, class K, class V>
void feed_backend(B& backend, K key, const V& value) {
  if constexpr (CanFeed<B, K>) backend.feed(key, value);
}
template <class K, class B>
decltype(auto) fetch_backend(B& backend) {
  if constexpr (CanFetch<B, K>)
    return backend.fetch(K{});
  else
    return after_diagnostic<typename K::value_type>();
}

// The merged step: TensorFlow's _HookedSession.run. A base of BasicMonitoredSession (Session),
// whose members it reads through self(); it holds nothing itself. Its cost is the session's
// per-step cost (see BasicMonitoredSession): everything here but stop_after_run() is inlined
// into the caller's loop.
template <class Session>
class SessionStep {
 protected:
  RUNHOOKS_DETAIL_HOT Session& self() noexcept { return static_cast<Session&>(*this); }
  // The profiling hook, where Session::profiler_index names one.
  RUNHOOKS_DETAIL_HOT auto& profiler() noexcept {
    return self().template hook<Session::profiler_index>();
  }

  // One hooked step: TensorFlow's _CoordinatedSession.run around _HookedSession.run. Refused
  // after a stop; timed span by span when a profiling hook asks for it; and an error that is not
  // a preemption gives way to a preemption a coordinator thread reported, so that the session
  // recovers from what really happened (rule 2 of recovery.hpp), a SingularMonitoredSession
  // included.
  // CheckStop: the caller found a stop asked for (only by the hooks, or it would have refused).
  template <bool CheckStop, class CallerArgs>
  RUNHOOKS_DETAIL_HOT auto run_step(const CallerArgs& args) {
    try {
      if constexpr (CheckStop) {
        if (self().stop_requested()) self().refuse_run();
      }
      if constexpr (Session::profiler_index != detail::npos) {
        if (profiler().profile_this_step()) [[unlikely]]
          return run_hooked<true>(args);
      }
      return run_hooked<false>(args);
    } catch (...) {
      self().raise_thread_preemption();
      throw;
    }
  }

 private:
  // Out of line, so that the per-step test of `attention` stays one compare of memory: inlined,
  // clang carries the flag's new value into the loop's head in a register. The loop ends here,
  // so a progress bar of this session ends its line now, before the program prints after the
  // loop (log.hpp, the live line).
  [[gnu::noinline]] void stop_after_run() noexcept {
    self().state_.set_stop();
    detail::live_line_loop_ends(&self().slot_.get());
  }

  template <bool Profiled, class CallerArgs>
  RUNHOOKS_DETAIL_HOT auto run_hooked(const CallerArgs& args) {
    using backend_type = typename Session::backend_type;
    using Ctx = SessionRunContext<backend_type, CallerArgs>;
    Ctx ctx(args, self().slot_.get());
    // Braced initialization runs the before_run calls left to right, in declaration order.
    auto requests = boost::hana::unpack(self().hooks_, [&](auto&... stored) {
      return boost::hana::basic_tuple<decltype(before_run_of<Profiled>(stored, ctx))...>{
          before_run_of<Profiled>(stored, ctx)...};
    });
    check_merged_shape<CallerArgs, decltype(requests)>(
        std::make_index_sequence<Session::hook_count>{});

    boost::hana::for_each(requests, [&](const auto& request) { feed(request); });
    feed(args);
    timed<Profiled>(detail::type_name<backend_type>(), "run", [&] { self().slot_.get().run(); });
    ctx.step_ran();

    // Every fetch reads the state the step left, before any after_run can change it.
    // Keyed by the caller's fetches only: run() returns one type whatever it feeds.
    SessionRunValues<detail::fetches_of_t<CallerArgs>> caller_values;
    auto values = boost::hana::unpack(requests, [](const auto&... request) {
      return boost::hana::basic_tuple<SessionRunValues<std::remove_cvref_t<decltype(request)>>...>{};
    });
    timed<Profiled>(detail::type_name<backend_type>(), "fetch", [&] {
    fetch_once(boost::hana::unpack(requests,
                                   [&](const auto&... request) {
                                     return boost::hana::basic_tuple<
                                         const CallerArgs*,
                                         const std::remove_cvref_t<decltype(request)>*...>{
                                         &args, &request...};
                                   }),
               boost::hana::unpack(values,
                                   [&](auto&... hook_values) {
                                     return boost::hana::basic_tuple<
                                         SessionRunValues<detail::fetches_of_t<CallerArgs>>*,
                                         std::remove_cvref_t<decltype(hook_values)>*...>{
                                         &caller_values, &hook_values...};
                                   }),
               std::make_index_sequence<Session::hook_count + 1>{});
    });
    call_after_run<Profiled>(ctx, requests, values,
                             std::make_index_sequence<Session::hook_count>{});
    if (ctx.stop_requested()) [[unlikely]]
      stop_after_run();

    if constexpr (has_fetch<CallerArgs>)
      return caller_values;
    else
      return;
  }

  // ---- before_run ------------------------------------------------------------------------

  template <bool Profiled, class Ctx, class Stored>
  auto before_run_of(Stored& stored, Ctx& ctx) {
    using Hook = std::remove_cvref_t<decltype(detail::unwrap(stored))>;
    if constexpr (Profiled && HasBeforeRun<Hook, Ctx>)
      return timed<true>(detail::type_name<Hook>(), "before_run",
                         [&] { return call_before_run(detail::unwrap(stored), ctx); });
    else
      return call_before_run(detail::unwrap(stored), ctx);
  }

  // Calls one hook's before_run; hooks without one (or returning void) add nothing.
  template <class Hook, class Ctx>
  static auto call_before_run(Hook& hook, Ctx& ctx) {
    static_assert(detail::check_before_run<Hook, Ctx>::value);
    if constexpr (HasBeforeRun<Hook, Ctx>) {
      using Result = decltype(hook.before_run(ctx));
      static_assert(detail::check_before_run_result<Hook, Ctx, Result>::value);
      if constexpr (std::is_void_v<Result>) {
        hook.before_run(ctx);
        return SessionRunArgs<>{};
      } else {
        return hook.before_run(ctx);
      }
    } else {
      return SessionRunArgs<>{};
    }
  }

  // ---- Feeds and fetches -----------------------------------------------------------------

  template <class Args>
  void feed(const Args& args) {
    args.for_each([&](const auto& item) {
      using Item = std::remove_cvref_t<decltype(item)>;
      if constexpr (detail::is_feed<Item>)
        detail::feed_backend(self().slot_.get(), typename Item::key_type{}, item.value);
    });
  }

  // Reads every fetched key from the backend once per step, however many requests name it:
  // the caller's request comes first, then the hooks' in order, and a request whose key an
  // earlier request already read this step gets a copy. A request receives a value only where
  // its own fetch is switched on. A key a hook declared before the requesting one produces is
  // not read here but by fill_produced, before the requesting hook's after_run.
  template <class Sources, class Sinks, std::size_t... S>
  void fetch_once(const Sources& sources, const Sinks& sinks, std::index_sequence<S...>) {
    (fetch_into<S>(sources, sinks), ...);
  }

  template <std::size_t S, class Sources, class Sinks>
  void fetch_into(const Sources& sources, const Sinks& sinks) {
    boost::hana::at_c<S>(sources)->for_each([&](const auto& item) {
      using Item = std::remove_cvref_t<decltype(item)>;
      if constexpr (detail::is_fetch<Item>) {
        using K = typename Item::key_type;
        // Source S > 0 is hook S - 1's request; no earlier source of a backend key produces it.
        if constexpr (S == 0 || producer_of<K, (S > 0 ? S - 1 : 0)> == detail::npos) {
          if (!item.enabled) return;
          auto& slot = boost::hana::at_c<S>(sinks)->template slot<K>();
          const auto* earlier = earlier_fetch<K>(sources, sinks, std::make_index_sequence<S>{});
          if (earlier != nullptr)
            slot = *earlier;
          else
            slot.emplace(detail::fetch_backend<K>(self().slot_.get()));
        }
      }
    });
  }

  template <class K, class Sources, class Sinks, std::size_t... J>
  static const std::optional<typename K::value_type>* earlier_fetch(
      const Sources& sources, const Sinks& sinks, std::index_sequence<J...>) {
    const std::optional<typename K::value_type>* found = nullptr;
    (
        [&] {
          using Args = std::remove_cvref_t<decltype(*boost::hana::at_c<J>(sources))>;
          if constexpr (Args::template has<Fetch<K>>) {
            if (found == nullptr && boost::hana::at_c<J>(sources)->template get<Fetch<K>>().enabled)
              found = &boost::hana::at_c<J>(sinks)->template slot<K>();
          }
        }(),
        ...);
    return found;
  }

  template <class Args>
  static constexpr bool has_fetch = [] {
    bool any = false;
    Args::for_each_item_type([&]<class Item>() { any = any || detail::is_fetch<Item>; });
    return any;
  }();

  // ---- after_run -------------------------------------------------------------------------

  // Hook I's slot of a key K that a hook declared before it produces (ProducesKey): the last
  // such producer's value, npos where none produces K.
  template <class K, std::size_t I>
  static constexpr std::size_t producer_of =
      detail::producers_of<K, typename Session::hooks_type>::last_before(I);

  // The keys of hook I's request that a hook before it produces, filled from that hook now,
  // after its after_run: the value produced at this step, or nothing. Nothing at all for a
  // request without such keys (every session without a producing hook).
  template <std::size_t I, class Request, class HookValues>
  void fill_produced(const Request& request, HookValues& hook_values) {
    request.for_each([&](const auto& item) {
      using Item = std::remove_cvref_t<decltype(item)>;
      if constexpr (detail::is_fetch<Item>) {
        using K = typename Item::key_type;
        constexpr std::size_t producer = producer_of<K, I>;
        if constexpr (producer != detail::npos) {
          if (item.enabled) {
            const auto& value =
                detail::unwrap(boost::hana::at_c<producer>(self().hooks_)).produced(K{});
            if (value.has_value()) [[unlikely]]
              hook_values.template slot<K>() = value;
          }
        }
      }
    });
  }

  template <bool Profiled, class Ctx, class Requests, class Values, std::size_t... I>
  void call_after_run(Ctx& ctx, const Requests& requests, Values& values,
                      std::index_sequence<I...>) {
    (
        [&] {
          fill_produced<I>(boost::hana::at_c<I>(requests), boost::hana::at_c<I>(values));
          auto& hook = detail::unwrap(boost::hana::at_c<I>(self().hooks_));
          using Hook = std::remove_cvref_t<decltype(hook)>;
          using HookValues = std::remove_cvref_t<decltype(boost::hana::at_c<I>(values))>;
          if constexpr (Profiled && HasAfterRun<Hook, Ctx, HookValues>)
            timed<true>(detail::type_name<Hook>(), "after_run", [&] {
              call_after_run_one(hook, ctx, boost::hana::at_c<I>(values));
            });
          else
            call_after_run_one(hook, ctx, boost::hana::at_c<I>(values));
        }(),
        ...);
  }

  template <class Hook, class Ctx, class HookValues>
  static void call_after_run_one(Hook& hook, Ctx& ctx, const HookValues& values) {
    static_assert(detail::check_after_run<Hook, Ctx, HookValues>::value);
    if constexpr (HasAfterRun<Hook, Ctx, HookValues>) hook.after_run(ctx, values);
  }

  // ---- Profiling -------------------------------------------------------------------------

  static double steady_secs() noexcept {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // f(), and, in a profiled step, its span reported to the profiling hook.
  template <bool Profiled, class F>
  decltype(auto) timed([[maybe_unused]] std::string_view who,
                       [[maybe_unused]] std::string_view what, F&& f) {
    if constexpr (!Profiled) {
      return f();
    } else {
      const double begin = steady_secs();
      if constexpr (std::is_void_v<decltype(f())>) {
        f();
        profiler().record_span(who, what, begin, steady_secs());
      } else {
        decltype(auto) result = f();
        profiler().record_span(who, what, begin, steady_secs());
        return result;
      }
    }
  }

  // ---- The merged shape, checked at compile time -----------------------------------------

  // The merged shape of one step, checked once per caller-args type at compile time: every key
  // is one the backend offers or, for a hook's fetch, one a hook before it produces; no input is
  // fed twice.
  template <class CallerArgs, class Requests, std::size_t... I>
  static constexpr void check_merged_shape(std::index_sequence<I...>) {
    using R = std::remove_cvref_t<Requests>;
    using backend_type = typename Session::backend_type;
    using hooks_type = typename Session::hooks_type;
    detail::check_backend_keys<backend_type, hooks_type, CallerArgs>();
    (detail::check_hook_request_keys<backend_type, hooks_type, I, hook_t<I>, request_t<R, I>>(),
     ...);
    (check_pairs_from<I, R>(std::index_sequence<I...>{}), ...);
    (detail::check_caller_feeds<hook_t<I>, request_t<R, I>, CallerArgs>(), ...);
  }
  template <std::size_t A, class R, std::size_t... B>
  static constexpr void check_pairs_from(std::index_sequence<B...>) {
    (
        [] {
          if constexpr (A < B)
            detail::check_hook_feeds<hook_t<A>, request_t<R, A>, hook_t<B>, request_t<R, B>>();
        }(),
        ...);
  }
  template <class R, std::size_t I>
  using request_t =
      std::remove_cvref_t<decltype(boost::hana::at_c<I>(std::declval<R&>()))>;
  // S: Session, named where the alias is used, once Session is complete.
  template <std::size_t I, class S = Session>
  using hook_t = detail::unwrap_hook_t<std::remove_cvref_t<decltype(boost::hana::at_c<I>(
      std::declval<typename S::hooks_type&>()))>>;
};

}  // namespace runhooks::detail
