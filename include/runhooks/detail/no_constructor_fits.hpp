// The hint a hook's catch-all constructor carries, so that arguments that fit none of its
// constructors (most often braced options with a misspelt field) give a short error naming the
// options type and its fields.
#pragma once

#include <cstddef>
#include <type_traits>

namespace runhooks::detail {

// Why the compiler cannot name the misspelt field itself. In
// `StepCounterHook({.every_n_step = 10})` the braced list is an argument of overload resolution
// (class template argument deduction, then the constructor call), and a designated list converts
// only to an aggregate that has every field it names ([over.ics.list]/2). So no constructor is
// viable, and GCC 12 and Clang 14 list the candidates with "no known conversion for argument 1
// from '<brace-enclosed initializer list>'" or "cannot convert initializer list argument": over
// fifty lines that never name the field. Only an initialization outside overload resolution
// names it: `StepCounterHook(StepCounterOptions{.every_n_step = 10})` gives
// "'StepCounterOptions' has no non-static data member named 'every_n_step'" (GCC) or "field
// designator 'every_n_step' does not refer to any field ...; did you mean 'every_n_steps'?"
// (Clang), in three to six lines.
//
// So each hook declares, after its constructors,
//   template <class Hint = detail::write_the_options_type<StepCounterOptions,
//                              &StepCounterOptions::every_n_steps, ...>>
//   explicit StepCounterHook(...) = delete;  // Misspelt field? Write StepCounterOptions{...} ...
// The C ellipsis takes any arguments, a braced list with any designators included, and is the
// worst match there is, so this constructor is chosen only when no other one fits; as a template
// it loses a tie (no arguments) to a non-template constructor. Deleted, it leaves
// std::is_constructible false; explicit, it adds no implicit conversion to the hook. The error is
// then "use of deleted function '...StepCounterHook(...) [with Hint =
// runhooks::detail::write_the_options_type<runhooks::StepCounterOptions,
// &runhooks::StepCounterOptions::every_n_steps, ...>]'" (GCC) or "call to deleted constructor"
// and a note naming the same type (Clang), then a note that shows the declaration's line: its
// comment says what to write, so it stays on that line however long. Five to eight lines.
//
// Class template argument deduction: the guide the catch-all implies ties with the guide of a
// constructor whose arguments all have defaults when there are no arguments (GCC 12 crashes
// there, Clang 14 calls it ambiguous), so such a hook adds the non-template guide
// `StepCounterHook() -> StepCounterHook<>;`, which wins the tie. A hook deduced through guides of
// its own (a partial specialization's constructors imply none) adds a catch-all guide: one that
// deduces the keys from a leading argument (LoggingTensorHook), or, where the keys come after the
// options, one that deduces a specialization holding only the deleted constructor
// (SummarySaverHook).
//
// The fields are pointers to members, so each name is checked, and the constraint checks that
// they are all there: a field added to the options but not to the hint does not compile.

// The class of a pointer to member.
template <class T>
struct member_class {};
template <class M, class C>
struct member_class<M C::*> {
  using type = C;
};

// Converts to any field's type: counts the fields of an aggregate.
struct any_field {
  template <class T>
  operator T() const;
};

// The number of initializers Options takes: its number of fields, since no options struct has a
// member that brace elision would split.
template <class Options, class... Initializers>
consteval std::size_t field_count() {
  if constexpr (requires { Options{Initializers{}..., any_field{}}; })
    return field_count<Options, Initializers..., any_field>();
  else
    return sizeof...(Initializers);
}

template <class Options, auto... Fields>
  requires(std::is_aggregate_v<Options> &&
           (std::is_same_v<typename member_class<decltype(Fields)>::type, Options> && ...) &&
           sizeof...(Fields) == field_count<Options>())
struct write_the_options_type {};

}  // namespace runhooks::detail
