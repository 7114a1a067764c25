// Where a session's backend lives: in the session itself, or, when a session creator makes it,
// in a slot that recovery empties and makes again.
#pragma once

#include <runhooks/detail/config.hpp>

#include <optional>
#include <utility>

#include <runhooks/session_creator.hpp>

namespace runhooks::detail {

// Where the backend lives: in the session itself, or, for a session creator, in an optional
// that recovery empties and refills.
template <class Source>
struct backend_slot {
  using backend_type = Source;
  static constexpr bool can_recreate = false;
  Source backend;
  explicit backend_slot(Source source) : backend(std::move(source)) {}
  Source& get() noexcept { return backend; }
  bool alive() const noexcept { return true; }
  void create() {}
};

template <SessionCreatorType Creator>
struct backend_slot<Creator> {
  using backend_type = typename Creator::backend_type;
  static constexpr bool can_recreate = true;
  Creator creator;
  std::optional<backend_type> backend;

  explicit backend_slot(Creator c) : creator(std::move(c)) {}
  backend_type& get() noexcept { return *backend; }
  bool alive() const noexcept { return backend.has_value(); }
  void destroy() noexcept { backend.reset(); }
  void create() {
    // Constructed in place from the creator's prvalue: backends need not be movable.
    struct from_creator {
      Creator& c;
      operator backend_type() { return c.create_session(); }
    };
    backend.emplace(from_creator{creator});
    if constexpr (requires { creator.initialize(*backend); }) {
      try {
        creator.initialize(*backend);  // restore a checkpoint, receive a chief's state, ...
      } catch (...) {
        backend.reset();
        throw;
      }
    }
  }
};

}  // namespace runhooks::detail
