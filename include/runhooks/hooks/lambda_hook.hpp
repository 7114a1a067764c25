// LambdaHook: a hook made of lambdas, one per hook point it needs (Keras' LambdaCallback).
#pragma once

#include <runhooks/detail/config.hpp>

#include <concepts>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include <runhooks/detail/type_list.hpp>

namespace runhooks {

namespace detail {

// A hook point no lambda was given for: the LambdaHook then has no member of that name at all,
// so the session does nothing there (see concepts.hpp).
struct no_point {};

enum class lambda_slot : std::size_t { begin, after_create_session, before_run, after_run, end };

// Marks LambdaHook's constructor from the five callables, so that class template argument
// deduction from several one-point hooks never picks it.
struct from_points_t {};
inline constexpr from_points_t from_points{};

// One base per point, empty for no_point. The members are constrained on the lambda's
// signature: a lambda that does not fit leaves a member that the session's checks find by name
// and reject with the same error as a hook class's wrong member.
template <class F>
struct begin_point {
  [[no_unique_address]] F begin_fn;
  void begin()
    requires std::invocable<F&>
  {
    begin_fn();
  }
};
template <>
struct begin_point<no_point> {};

template <class F>
struct after_create_session_point {
  [[no_unique_address]] F after_create_session_fn;
  template <class Backend>
    requires std::invocable<F&, Backend&>
  void after_create_session(Backend& session) {
    after_create_session_fn(session);
  }
  template <class Backend, class Coord>
    requires std::invocable<F&, Backend&, Coord&>
  void after_create_session(Backend& session, Coord& coord) {
    after_create_session_fn(session, coord);
  }
};
template <>
struct after_create_session_point<no_point> {};

template <class F>
struct before_run_point {
  [[no_unique_address]] F before_run_fn;
  template <class Ctx>
    requires std::invocable<F&, Ctx&>
  decltype(auto) before_run(Ctx& run_context) {
    return before_run_fn(run_context);
  }
};
template <>
struct before_run_point<no_point> {};

template <class F>
struct after_run_point {
  [[no_unique_address]] F after_run_fn;
  template <class Ctx, class Values>
    requires std::invocable<F&, Ctx&, const Values&>
  void after_run(Ctx& run_context, const Values& run_values) {
    after_run_fn(run_context, run_values);
  }
};
template <>
struct after_run_point<no_point> {};

template <class F>
struct end_point {
  [[no_unique_address]] F end_fn;
  template <class Backend>
    requires std::invocable<F&, Backend&>
  void end(Backend& session) {
    end_fn(session);
  }
};
template <>
struct end_point<no_point> {};

}  // namespace detail

// A hook whose points are lambdas (or any callables), each optional; build it with
//   runhooks::on_begin(f), on_after_create_session(f), on_before_run(f), on_after_run(f),
//   on_end(f)
// each of which is a LambdaHook with that one point, and combine several in one hook with
//   runhooks::LambdaHook{runhooks::on_begin(f), runhooks::on_after_run(g)}
// The callables take what the points take: f(), f(session) or f(session, coord),
// f(run_context) returning void or runhooks::SessionRunArgs{...}, f(run_context, run_values),
// f(session). A point without a lambda is absent and costs nothing; a lambda whose signature
// does not fit its point is the compile error a wrong member function gives, naming the point.
// A coordinator parameter written `runhooks::Coordinator&` may stop the coordinator (the session
// then polls it every step); `const auto&` only reads it.
//
// Why not a designated initializer, LambdaHook{.after_run = f}: that needs class template
// argument deduction for aggregates (P1816), which Clang supports only from version 17.
template <class Begin = detail::no_point, class AfterCreateSession = detail::no_point,
          class BeforeRun = detail::no_point, class AfterRun = detail::no_point,
          class End = detail::no_point>
class LambdaHook : public detail::begin_point<Begin>,
                   public detail::after_create_session_point<AfterCreateSession>,
                   public detail::before_run_point<BeforeRun>,
                   public detail::after_run_point<AfterRun>,
                   public detail::end_point<End> {
 public:
  using begin_type = Begin;
  using after_create_session_type = AfterCreateSession;
  using before_run_type = BeforeRun;
  using after_run_type = AfterRun;
  using end_type = End;

  // The callables, point by point (detail::no_point{} for an absent one).
  constexpr LambdaHook(detail::from_points_t, Begin begin, AfterCreateSession after_create_session,
                       BeforeRun before_run, AfterRun after_run, End end)
      : detail::begin_point<Begin>(point<detail::begin_point<Begin>>(std::move(begin))),
        detail::after_create_session_point<AfterCreateSession>(
            point<detail::after_create_session_point<AfterCreateSession>>(
                std::move(after_create_session))),
        detail::before_run_point<BeforeRun>(
            point<detail::before_run_point<BeforeRun>>(std::move(before_run))),
        detail::after_run_point<AfterRun>(
            point<detail::after_run_point<AfterRun>>(std::move(after_run))),
        detail::end_point<End>(point<detail::end_point<End>>(std::move(end))) {}

  // Several one-point hooks merged into one (each point from at most one of them).
  template <class... Parts>
    requires(sizeof...(Parts) > 1)
  constexpr LambdaHook(Parts... parts)
      : LambdaHook(detail::from_points, pick<detail::lambda_slot::begin>(parts...),
                   pick<detail::lambda_slot::after_create_session>(parts...),
                   pick<detail::lambda_slot::before_run>(parts...),
                   pick<detail::lambda_slot::after_run>(parts...),
                   pick<detail::lambda_slot::end>(parts...)) {}

  template <detail::lambda_slot Slot>
  constexpr auto& callable() noexcept {
    if constexpr (Slot == detail::lambda_slot::begin)
      return this->begin_fn;
    else if constexpr (Slot == detail::lambda_slot::after_create_session)
      return this->after_create_session_fn;
    else if constexpr (Slot == detail::lambda_slot::before_run)
      return this->before_run_fn;
    else if constexpr (Slot == detail::lambda_slot::after_run)
      return this->after_run_fn;
    else
      return this->end_fn;
  }

  template <detail::lambda_slot Slot>
  using slot_type = std::tuple_element_t<static_cast<std::size_t>(Slot),
                                         std::tuple<Begin, AfterCreateSession, BeforeRun, AfterRun, End>>;

 private:
  // An absent point's base is empty and takes no initializer.
  template <class Base, class F>
  static constexpr Base point(F f) {
    if constexpr (std::is_same_v<F, detail::no_point>)
      return Base{};
    else
      return Base{std::move(f)};
  }

  template <detail::lambda_slot Slot, class... Parts>
  static constexpr auto pick(Parts&... parts) {
    constexpr std::size_t given =
        (0 + ... + !std::is_same_v<typename Parts::template slot_type<Slot>, detail::no_point>);
    static_assert(given <= 1,
                  "runhooks::LambdaHook: two lambdas for the same hook point; give each point "
                  "one lambda.");
    if constexpr (given == 0) {
      return detail::no_point{};
    } else {
      constexpr std::size_t index = detail::index_of<
          std::true_type,
          std::bool_constant<!std::is_same_v<typename Parts::template slot_type<Slot>,
                                             detail::no_point>>...>;
      return std::move(std::get<index>(std::forward_as_tuple(parts...)).template callable<Slot>());
    }
  }
};

namespace detail {
// The callable type the parts give for Slot: the first that is not no_point, or no_point.
template <lambda_slot Slot, class... Parts>
struct merged_slot {
  using type = no_point;
};
template <lambda_slot Slot, class Part, class... Parts>
struct merged_slot<Slot, Part, Parts...> {
  using type = std::conditional_t<
      std::is_same_v<typename Part::template slot_type<Slot>, no_point>,
      typename merged_slot<Slot, Parts...>::type, typename Part::template slot_type<Slot>>;
};
template <lambda_slot Slot, class... Parts>
using merged_slot_t = typename merged_slot<Slot, Parts...>::type;

template <class T>
inline constexpr bool is_lambda_hook = false;
template <class... Fs>
inline constexpr bool is_lambda_hook<LambdaHook<Fs...>> = true;
}  // namespace detail

template <class... Parts>
  requires(sizeof...(Parts) > 1 && (detail::is_lambda_hook<Parts> && ...))
LambdaHook(Parts...)
    -> LambdaHook<detail::merged_slot_t<detail::lambda_slot::begin, Parts...>,
                  detail::merged_slot_t<detail::lambda_slot::after_create_session, Parts...>,
                  detail::merged_slot_t<detail::lambda_slot::before_run, Parts...>,
                  detail::merged_slot_t<detail::lambda_slot::after_run, Parts...>,
                  detail::merged_slot_t<detail::lambda_slot::end, Parts...>>;

template <class F>
constexpr auto on_begin(F f) {
  return LambdaHook<F>(detail::from_points, std::move(f), {}, {}, {}, {});
}
template <class F>
constexpr auto on_after_create_session(F f) {
  return LambdaHook<detail::no_point, F>(detail::from_points, {}, std::move(f), {}, {}, {});
}
template <class F>
constexpr auto on_before_run(F f) {
  return LambdaHook<detail::no_point, detail::no_point, F>(detail::from_points, {}, {},
                                                           std::move(f), {}, {});
}
template <class F>
constexpr auto on_after_run(F f) {
  return LambdaHook<detail::no_point, detail::no_point, detail::no_point, F>(
      detail::from_points, {}, {}, {}, std::move(f), {});
}
template <class F>
constexpr auto on_end(F f) {
  return LambdaHook<detail::no_point, detail::no_point, detail::no_point, detail::no_point, F>(
      detail::from_points, {}, {}, {}, {}, std::move(f));
}

}  // namespace runhooks
