// The session's handle on its Coordinator. The Coordinator and its thread machinery live in
// <runhooks/coordinator.hpp>; the core names only the incomplete type, so a session whose hooks
// never take the coordinator compiles none of it.
#pragma once

#include <atomic>
#include <exception>

namespace runhooks {

class Coordinator;

namespace detail {

// The coordinator's rare operations, filled in by a template instantiated where the complete
// type is known (the first get<>()). None of them is on the per-step path.
struct CoordinatorOps {
  void (*destroy)(Coordinator*) noexcept;
  // Stops the coordinator and joins its threads, waiting up to grace_secs for them and joining
  // them anyway after that; returns the error a thread reported instead of throwing it.
  std::exception_ptr (*stop_and_join)(Coordinator&, double grace_secs) noexcept;
  void (*reset)(Coordinator&) noexcept;
  std::exception_ptr (*error)(const Coordinator&) noexcept;
};

// Made on demand: by the session's constructor when a hook takes or reads the coordinator, or
// by the first session.coordinator(). Until then the slot is three null pointers.
class CoordinatorSlot {
 public:
  // `stopped` is the session's flag that the coordinator raises when it is stopped, so that a
  // session polling it loads its own member.
  explicit CoordinatorSlot(std::atomic<bool>* stopped) noexcept : stopped_(stopped) {}
  CoordinatorSlot(const CoordinatorSlot&) = delete;
  CoordinatorSlot& operator=(const CoordinatorSlot&) = delete;
  ~CoordinatorSlot() {
    if (coord_ != nullptr) ops_->destroy(coord_);  // stops and joins its threads
  }

  // C is always Coordinator; as a template parameter it is completed only where this is used.
  template <class C = Coordinator>
  C& get() {
    static_assert(requires { sizeof(C); },
                  "runhooks: using the coordinator needs its definition: add "
                  "#include <runhooks/coordinator.hpp>.");
    if (coord_ == nullptr) {
      C* made = new C();
      made->raise_on_stop(stopped_);
      coord_ = made;
      ops_ = &ops_for<C>;
      flag_ = &made->stop_flag();
    }
    return *coord_;
  }

  bool exists() const noexcept { return coord_ != nullptr; }
  // One seq_cst load (clear_stop() orders its own stores with the coordinator's); only for a
  // slot that exists, and never on the per-step path.
  bool stop_requested() const noexcept { return flag_->load(std::memory_order_seq_cst); }
  std::exception_ptr stop_and_join(double grace_secs) noexcept {
    return coord_ != nullptr ? ops_->stop_and_join(*coord_, grace_secs) : nullptr;
  }
  void reset() noexcept {
    if (coord_ != nullptr) ops_->reset(*coord_);
  }
  std::exception_ptr error() const noexcept {
    return coord_ != nullptr ? ops_->error(*coord_) : nullptr;
  }

 private:
  template <class C>
  static constexpr CoordinatorOps ops_for = {
      [](Coordinator* c) noexcept { delete static_cast<C*>(c); },
      [](Coordinator& c, double grace_secs) noexcept -> std::exception_ptr {
        try {
          static_cast<C&>(c).join_for_session(grace_secs);
        } catch (...) {
          return std::current_exception();
        }
        return nullptr;
      },
      [](Coordinator& c) noexcept { static_cast<C&>(c).reset(); },
      [](const Coordinator& c) noexcept { return static_cast<const C&>(c).requested_exception(); },
  };

  std::atomic<bool>* stopped_;
  Coordinator* coord_ = nullptr;
  const CoordinatorOps* ops_ = nullptr;
  const std::atomic<bool>* flag_ = nullptr;
};

}  // namespace detail
}  // namespace runhooks
